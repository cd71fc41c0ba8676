"""Figures of a sweep: extrapolation curves, per-position loss, NTK drift and cross-kernels,
kernel heatmaps, scaling laws and a one-page dashboard.

Every function takes a run directory (or several, or loaded Results, or an already-queried
polars frame), returns a matplotlib ``Figure`` (built without pyplot, so no global state),
and writes it when ``out`` is given (format from the extension: ``.png``, ``.pdf``, ``.svg``;
:func:`save` writes several formats at once). Length axes are log2 with a dashed line at
L_train; the shaded band around a line is ± one standard error over seeds (drawn where a
configuration has several seeds). Colours: one hue per PE kind / RoPE scaling method, light
and dark shades of it for the scaling factors.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib import colors as mcolors
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec
from matplotlib.lines import Line2D

from rope_lab import query as q
from rope_lab.fits import fit_power_law
from rope_lab.query import PLOT_KINDS, QueryError

__all__ = [
    "DRIFT_METRICS",
    "KINDS",
    "extrapolation",
    "load_kernel_arrays",
    "ntk_cross",
    "ntk_drift",
    "plot",
    "plot_kernel_matrices",
    "plot_options",
    "positions",
    "save",
    "scaling",
    "scaling_data",
    "summary",
]

KINDS: Final = PLOT_KINDS
DRIFT_METRICS: Final = ("distance_from_init", "velocity", "relative_change")
CROSS_METRICS: Final = ("k_cross_cos_mean", "cross_train_cos_ratio")
EVAL_METRICS: Final = ("loss", "perplexity", "accuracy", "exact_match", "error_rate")
FORMATS: Final = ("png", "pdf", "svg")
LENGTH_AXES: Final = frozenset({"length", "length_ratio", "probe_length"})

NAMES: Final[Mapping[str, str]] = {
    "length": "evaluation length (tokens)",
    "length_ratio": "evaluation length / L_train",
    "probe_length": "probe length (tokens)",
    "position": "position in sequence (tokens)",
    "step": "training step",
    "loss": "loss (nats / scored token)",
    "perplexity": "perplexity",
    "accuracy": "accuracy",
    "exact_match": "exact match",
    "error_rate": "error rate (1 − accuracy)",
    "model.width": "width (d_model)",
    "n_params": "parameters",
    "train.length": "L_train",
    "task.name": "task",
    "model.position.kind": "position encoding",
    "model.parametrization": "parametrization",
    "model.depth": "depth",
    "label": "PE / RoPE scaling",
    "distance_from_init": "distance from init",
    "relative_change": "relative change",
    "velocity": "velocity",
    "k_cross_cos_mean": "mean cos(K) long probe × train",
    "k_train_cos_mean": "mean cos(K) train × train",
    "cross_train_cos_ratio": "cross / train kernel cosine",
    "effective_rank": "effective rank",
}
SHORT: Final[Mapping[str, str]] = {
    "model.width": "width",
    "train.length": "L_train",
    "task.name": "task",
    "model.position.kind": "PE",
    "model.parametrization": "param.",
    "model.depth": "depth",
}
_COL_AUTO: Final = ("model.width",)
_ROW_AUTO: Final = ("train.length", "task.name", "model.parametrization", "model.depth")
_FAMILIES: Final = (
    "none",
    "learned",
    "sinusoidal",
    "alibi",
    "rope",
    "rope/linear",
    "rope/ntk",
    "rope/dynamic",
    "rope/yarn",
    "rope/llama3",
    "rope/longrope",
)
_DASHES: Final[tuple[Any, ...]] = ("", (4, 1.5), (1, 1.2), (5, 1.5, 1, 1.5), (2, 2), (6, 2, 2, 2))
PANEL: Final = (4.4, 3.3)

Source = q.Source | pl.DataFrame


# --------------------------------------------------------------------------------------------
# Helpers


def name_of(col: str) -> str:
    """Axis label of a column."""
    return NAMES.get(col, col.rsplit(".", 1)[-1].replace("_", " "))


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _facet_title(col: str, value: Any) -> str:
    return f"{SHORT.get(col, col)} {_fmt(value)}"


def save(
    fig: Figure, path: str | Path, *, formats: Sequence[str] = (), dpi: int = 150
) -> list[Path]:
    """Write ``fig`` to ``path`` (format from its extension) and to each of ``formats``.

    ``save(fig, "plots/x.png", formats=("pdf",))`` writes ``x.png`` and ``x.pdf``.
    """
    path = Path(path)
    ext = path.suffix.lstrip(".").lower()
    if ext not in FORMATS:
        raise QueryError(f"cannot write {path}: use one of the extensions .{', .'.join(FORMATS)}")
    written = []
    for fmt in dict.fromkeys([ext, *(f.lstrip(".").lower() for f in formats)]):
        if fmt not in FORMATS:
            raise QueryError(f"unknown figure format {fmt!r}; formats are {', '.join(FORMATS)}")
        target = path.with_suffix(f".{fmt}")
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format=fmt, dpi=dpi, bbox_inches="tight")
        written.append(target)
    return written


def _finish(fig: Figure, out: str | Path | None) -> Figure:
    if out is not None:
        save(fig, out)
    return fig


def _eval_frame(source: Source, *, whole_sequence: bool = True) -> pl.DataFrame:
    if isinstance(source, pl.DataFrame):
        frame = source
        if whole_sequence and "position_bucket" in frame.columns:
            frame = frame.filter(pl.col("position_bucket").is_null())
    else:
        frame = q.eval_table(source, whole_sequence=whole_sequence)
    if frame.is_empty():
        raise QueryError("no eval rows in these run directories")
    if "accuracy" in frame.columns and "error_rate" not in frame.columns:
        frame = frame.with_columns((1.0 - pl.col("accuracy")).alias("error_rate"))
    if "label" not in frame.columns:
        frame = frame.with_columns(q.label_expr(frame.columns))
    return frame


def _ntk_frame(source: Source) -> pl.DataFrame:
    frame = source if isinstance(source, pl.DataFrame) else q.ntk_table(source)
    if frame.is_empty():
        raise QueryError(
            "no ntk rows in these run directories (the ntk table is written by NTK tracking)"
        )
    if "label" not in frame.columns:
        frame = frame.with_columns(q.label_expr(frame.columns, as_trained="none"))
    return frame


def _auto(frame: pl.DataFrame, value: str | None, candidates: Sequence[str]) -> str | None:
    if value != "auto":
        return value
    varying = q.varying_columns(frame, candidates)
    return varying[0] if varying else None


def _finite(frame: pl.DataFrame, col: str) -> pl.DataFrame:
    value = pl.col(col).cast(pl.Float64)
    return frame.filter(value.is_not_null() & value.is_finite())


def label_key(label: str) -> tuple[int, str, float, int, str]:
    """Sort key of curve labels: PE kinds, then RoPE scalings by method, factor, fine-tuning."""
    family = label.split(" ")[0]
    factor = re.search(r" x([0-9.]+)", label)
    ft = re.search(r"\+ft(\d+)", label)
    rank = _FAMILIES.index(family) if family in _FAMILIES else len(_FAMILIES)
    return (
        rank,
        family,
        float(factor.group(1)) if factor else 0.0,
        int(ft.group(1)) if ft else 0,
        label,
    )


# One colour per PE kind; light -> dark shades of one hue per RoPE scaling method.
_BASE_COLORS: Final[Mapping[str, str]] = {
    "none": "#7f7f7f",
    "learned": "#ff7f0e",
    "sinusoidal": "#bcbd22",
    "alibi": "#2ca02c",
    "rope": "#d62728",
}
_SCALED_COLORS: Final[Mapping[str, tuple[str, str]]] = {
    "rope/linear": ("#9ecae1", "#08519c"),
    "rope/ntk": ("#c6b3e6", "#54278f"),
    "rope/dynamic": ("#dfc27d", "#8c510a"),
    "rope/yarn": ("#f7a8cf", "#ae017e"),
    "rope/llama3": ("#99e0e8", "#0e8b99"),
    "rope/longrope": ("#d9d98c", "#6b6b00"),
}
_LABEL_HUES: Final = frozenset({"label", "model.position.kind", "kind"})


def _hue_mapping(values: Iterable[Any], hue: str | None) -> tuple[list[Any], dict[Any, Any]]:
    """Order and colours of the hue levels: PE / scaling families, or a sequential palette."""
    levels = [v for v in dict.fromkeys(values) if v is not None]
    if hue in _LABEL_HUES and all(isinstance(v, str) for v in levels):
        order = sorted(levels, key=lambda v: label_key(v))
        families: dict[str, list[str]] = {}
        for v in order:
            families.setdefault(label_key(v)[1], []).append(v)
        unknown = [f for f in families if f not in _BASE_COLORS and f not in _SCALED_COLORS]
        spare = dict(zip(unknown, sns.color_palette("husl", len(unknown)), strict=True))
        palette: dict[Any, Any] = {}
        for family, members in families.items():
            if family in _SCALED_COLORS:
                light, dark = _SCALED_COLORS[family]
            else:
                light = dark = _BASE_COLORS.get(family) or spare[family]
            n = len(members)
            shades = [dark] if n == 1 else sns.blend_palette([light, dark], n)
            palette.update(zip(members, shades, strict=True))
        return order, palette
    if levels and all(isinstance(v, int | float) for v in levels):
        order = sorted(levels)
        cmap = sns.color_palette("viridis", len(order) + 1)
        return order, {v: cmap[i] for i, v in enumerate(order)}
    order = sorted(levels, key=str)
    return order, dict(zip(order, sns.color_palette("tab10", len(order)), strict=False))


def _is_scaled(label: Any) -> bool:
    return isinstance(label, str) and "/" in label


def _styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    """Draw under seaborn's whitegrid style (rcParams restored afterwards)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
            return func(*args, **kwargs)

    return wrapper


def _warn_if_mixed(frame: pl.DataFrame, keys: Sequence[str | None]) -> None:
    """Warn when a plotted cell averages over a varying config column other than the seed."""
    keys = [k for k in dict.fromkeys(keys) if k]
    if "train.seed" in frame.columns:
        counts = frame.group_by([*keys, "train.seed"]).len()
        if counts.get_column("len").max() in (None, 0, 1):
            return
    skip = set(keys) | q.RUN_COLUMNS | q.MEASUREMENT_COLUMNS | {"label", "method", "factor"}
    mixed = []
    for c in frame.columns:
        if c in skip or c.startswith("eval.") or frame.schema[c] == pl.List:
            continue
        if "trial_id" in frame.columns and c in ("step", "probe_length", "group", "metric"):
            continue
        try:
            n = frame.group_by(keys).agg(pl.col(c).n_unique()).get_column(c).max()
        except pl.exceptions.PolarsError:
            continue
        if isinstance(n, int) and n > 1:
            mixed.append(c)
    if mixed:
        warnings.warn(
            f"each plotted point averages over different values of {', '.join(mixed)}; facet "
            "them (col=/row=) or filter them out",
            stacklevel=3,
        )


def _n_seeds(frame: pl.DataFrame, keys: Sequence[str | None]) -> int:
    keys = [k for k in dict.fromkeys(keys) if k]
    if "trial_id" not in frame.columns or frame.is_empty():
        return 1
    counts = frame.group_by(keys).agg(pl.col("trial_id").n_unique()).get_column("trial_id")
    return int(counts.to_numpy().max())


def _grid(
    nrows: int, ncols: int, *, sharex: bool = True, sharey: bool = True, panel=PANEL, extra=2.2
) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(panel[0] * ncols + extra, panel[1] * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)
    return fig, axes


def _facets(
    frame: pl.DataFrame,
    col: str | None,
    row: str | None,
    *,
    col_levels: Sequence[Any] | None = None,
    **kw: Any,
) -> tuple[Figure, list[tuple[Axes, pl.DataFrame, str]]]:
    cols = list(col_levels) if col_levels is not None else _levels(frame, col)
    rows = _levels(frame, row)
    fig, axes = _grid(len(rows), len(cols), **kw)
    items = []
    for i, rv in enumerate(rows):
        for j, cv in enumerate(cols):
            sub = frame
            parts = []
            if row is not None:
                sub = (
                    sub.filter(pl.col(row) == rv)
                    if rv is not None
                    else sub.filter(pl.col(row).is_null())
                )
                parts.append(_facet_title(row, rv))
            if col is not None:
                sub = (
                    sub.filter(pl.col(col) == cv)
                    if cv is not None
                    else sub.filter(pl.col(col).is_null())
                )
                parts.append(_facet_title(col, cv))
            items.append((axes[i, j], sub, ", ".join(parts)))
    for ax in axes[-1, :]:
        ax.tick_params(labelbottom=True)
    return fig, items


def _levels(frame: pl.DataFrame, col: str | None) -> list[Any]:
    if col is None:
        return [None]
    values = frame.get_column(col).unique().to_list()
    return sorted(values, key=lambda v: (v is None, v if not isinstance(v, str) else 0, str(v)))


def _outer_labels(fig_axes: Sequence[Axes], xlabel: str, ylabel: str) -> None:
    for ax in fig_axes:
        spec = ax.get_subplotspec()
        if spec is None:
            continue
        ax.set_xlabel(xlabel if spec.is_last_row() else "")
        ax.set_ylabel(ylabel if spec.is_first_col() else "")


def _lineplot(
    ax: Axes,
    frame: pl.DataFrame,
    x: str,
    y: str,
    hue: str | None,
    order: Sequence[Any] | None,
    palette: Mapping[Any, Any] | None,
    *,
    style: str | None = None,
    style_order: Sequence[Any] | None = None,
    marker: str | None = "o",
) -> None:
    cols = list(dict.fromkeys(c for c in (x, y, hue, style) if c))
    data = _finite(frame, y).select(cols)
    if data.is_empty():
        return
    pdf = data.to_pandas()
    present = set(pdf[hue]) if hue else set()
    kw: dict[str, Any] = {}
    if hue:
        kw.update(hue=hue, hue_order=[v for v in (order or []) if v in present], palette=palette)
    if style is None and hue == "label":
        pdf["_scaled"] = pdf[hue].map(_is_scaled)
        style, style_order = "_scaled", [False, True]
        kw.update(style=style, style_order=style_order, dashes={False: "", True: (4, 1.6)})
    elif style:
        present_styles = set(pdf[style])
        levels = [s for s in (style_order or sorted(present_styles)) if s in present_styles]
        kw.update(
            style=style,
            style_order=levels,
            dashes={s: _DASHES[i % len(_DASHES)] for i, s in enumerate(style_order or levels)},
        )
    sns.lineplot(
        data=pdf,
        x=x,
        y=y,
        errorbar=("se", 1),
        err_kws={"alpha": 0.18, "linewidth": 0},
        marker=marker,
        markersize=4.5,
        markeredgewidth=0,
        linewidth=1.6,
        legend=False,
        ax=ax,
        **kw,
    )


def _ci_text(ci: tuple[float, float], n: int, n_groups: int, fmt: str = ".2f") -> str:
    """`` [lo, hi]`` when a bootstrap interval means something, else why not."""
    if n <= 2:
        return f" (n={n}: exact, no CI)"
    if n_groups < 3 or not ci[1] > ci[0]:
        return f" (n={n}, no CI)"
    return f" [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _has_ci(fit: Any) -> bool:
    """Whether a bootstrap interval is worth drawing (>= 3 resampling units, > 2 points)."""
    return bool(fit.n > 2 and fit.n_groups >= 3 and fit.b_ci[1] > fit.b_ci[0])


def _loglog(ax: Axes, xs: Sequence[float], ys: Sequence[float]) -> None:
    """log2 x with the data's values as ticks, log10 y with plain labels."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    x_values = sorted({float(v) for v in xs if v is not None and v > 0})
    if 0 < len(x_values) <= 8:
        ax.xaxis.set_major_locator(ticker.FixedLocator(x_values))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.4g}"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    y_values = [float(v) for v in ys if v is not None and np.isfinite(v) and v > 0]
    narrow = bool(y_values) and max(y_values) / min(y_values) < 8
    ax.yaxis.set_major_locator(
        ticker.MaxNLocator(nbins=5)  # less than a decade: evenly spaced plain values
        if narrow
        else ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0))
    )
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _plain_log(ax: Axes, axis: str) -> None:
    """log10 scale labelled 1, 10, 100 (or 0.2, 0.5, 1) instead of mathtext powers."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(ticker.LogLocator(base=10, subs=(1.0,) if axis == "x" else (1, 2, 5)))
    a.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(ticker.NullFormatter())


def _log2_axis(ax: Axes, values: Iterable[float], axis: str = "x") -> None:
    ticks = sorted({float(v) for v in values if v is not None and v > 0})
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    if ticks and len(ticks) <= 12:
        a.set_major_locator(ticker.FixedLocator(ticks))
    a.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_locator(ticker.NullLocator())


def _mark_train_length(ax: Axes, values: Iterable[float], *, text: str = "L_train") -> None:
    for v in sorted({float(v) for v in values if v is not None}):
        ax.axvline(v, linestyle="--", color="0.3", linewidth=1.1, zorder=1.5)
        ax.text(
            v,
            0.99,
            f" {text}",
            transform=ax.get_xaxis_transform(),
            ha="left",
            va="top",
            fontsize=8,
            color="0.3",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.5},
        )


def _unit_ylim(ax: Axes, metric: str) -> None:
    if metric in ("accuracy", "exact_match", "error_rate"):
        ax.set_ylim(-0.03, 1.03)


def _legend(
    fig: Figure,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
    title: str,
    *,
    styles: Sequence[Any] = (),
    style_title: str = "",
) -> None:
    handles: list[Any] = []
    for v in order:
        line = Line2D(
            [], [], color=palette[v], marker="o", markersize=5, linewidth=2, label=_fmt(v)
        )
        if _is_scaled(v):
            line.set_dashes((4, 1.6))
        handles.append(line)
    if styles:
        handles.append(Line2D([], [], linestyle="none", label=""))
        handles.append(Line2D([], [], linestyle="none", label=style_title))
        for i, s in enumerate(styles):
            dash = _DASHES[i % len(_DASHES)]
            line = Line2D([], [], color="0.25", linewidth=1.6, label=_fmt(s))
            if dash:
                line.set_dashes(dash)
            handles.append(line)
    fig.legend(handles=handles, title=title, loc="outside right center", frameon=False)


def _spread_note(n_seeds: int) -> str:
    if n_seeds > 1:
        return f"mean over {n_seeds} seeds, band ± 1 s.e."
    return "one seed per configuration"


def _constant_note(frame: pl.DataFrame, cols: Sequence[str]) -> str:
    parts = []
    for c in cols:
        if c in frame.columns:
            values = frame.get_column(c).unique().drop_nulls().to_list()
            if len(values) == 1:
                parts.append(f"{SHORT.get(c, c)} {_fmt(values[0])}")
    return ", ".join(parts)


def _subtitle(*parts: str) -> str:
    return " · ".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------
# Extrapolation and positions


def _draw_extrapolation(
    ax: Axes,
    sub: pl.DataFrame,
    *,
    metric: str,
    x: str,
    hue: str,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
) -> None:
    _lineplot(ax, sub, x, metric, hue, order, palette)
    if x in LENGTH_AXES:
        _log2_axis(ax, sub.get_column(x).to_list())
    if x == "length" and "train.length" in sub.columns:
        _mark_train_length(ax, sub.get_column("train.length").unique().to_list())
    elif x == "length_ratio":
        _mark_train_length(ax, [1.0])
    _unit_ylim(ax, metric)


@_styled
def extrapolation(
    source: Source,
    *,
    metric: str = "accuracy",
    x: str = "length",
    hue: str = "label",
    col: str | None = "auto",
    row: str | None = "auto",
    out: str | Path | None = None,
) -> Figure:
    """``metric`` vs evaluation length, one line per PE kind / RoPE scaling (``label``).

    Facets: ``col``/``row`` columns ("auto": width as columns, L_train / task /
    parametrization / depth as rows when they vary; None: no facet). ``x="length_ratio"``
    puts L_train at 1.
    """
    frame = _eval_frame(source)
    col = _auto(frame, col, _COL_AUTO)
    row = _auto(frame, row, _ROW_AUTO)
    q.check_columns(frame, [x, metric, hue, *(c for c in (col, row) if c)], "the plot")
    frame = _finite(frame, metric)
    if frame.is_empty():
        raise QueryError(f"no finite {metric!r} values to plot")
    _warn_if_mixed(frame, [x, hue, col, row])
    order, palette = _hue_mapping(frame.get_column(hue).to_list(), hue)
    fig, items = _facets(frame, col, row)
    for ax, sub, title in items:
        _draw_extrapolation(ax, sub, metric=metric, x=x, hue=hue, order=order, palette=palette)
        ax.set_title(title)
    _outer_labels([ax for ax, _, _ in items], name_of(x), name_of(metric))
    seeds = _n_seeds(frame, [x, hue, col, row])
    fig.suptitle(
        f"Length extrapolation: {name_of(metric)} vs {name_of(x)}\n"
        + _subtitle(_constant_note(frame, ["task.name", "train.length"]), _spread_note(seeds)),
        fontsize=11,
    )
    _legend(fig, order, palette, name_of(hue))
    return _finish(fig, out)


def _bucket_frame(frame: pl.DataFrame, metric: str, length: int | str) -> pl.DataFrame:
    rows = frame.filter(pl.col("position_bucket").is_not_null())
    if rows.is_empty():
        raise QueryError("no per-position rows (eval.position_buckets was 0)")
    if length == "longest":
        rows = rows.filter(pl.col("length") == pl.col("length").max().over("trial_id"))
    else:
        rows = rows.filter(pl.col("length") == int(length))
        if rows.is_empty():
            have = sorted(frame.get_column("length").unique().to_list())
            raise QueryError(f"no rows at length {length}; lengths: {have}")
    keys = ["trial_id", "method", "factor", "finetune_steps", "length"]
    rows = rows.sort([*keys, "position_bucket"], nulls_last=True)
    end = pl.col("position_bucket").shift(-1).over(keys).fill_null(pl.col("length"))
    return rows.with_columns(((pl.col("position_bucket") + end) / 2).alias("position"))


def _draw_positions(
    ax: Axes,
    sub: pl.DataFrame,
    *,
    metric: str,
    hue: str,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
) -> None:
    _lineplot(ax, sub, "position", metric, hue, order, palette)
    lengths = sub.get_column("length").unique().drop_nulls().to_list()
    top = max(lengths) if lengths else None
    if "train.length" in sub.columns:
        trains = sub.get_column("train.length").unique().drop_nulls().to_list()
        _mark_train_length(ax, trains)
        if trains and top and top > min(trains):
            ax.axvspan(min(trains), top, color="0.5", alpha=0.07, zorder=0, linewidth=0)
    if top:
        ax.set_xlim(0, top)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=6, integer=True))
    _unit_ylim(ax, metric)


@_styled
def positions(
    source: Source,
    *,
    metric: str = "loss",
    length: int | str = "longest",
    hue: str = "label",
    col: str | None = "auto",
    row: str | None = "auto",
    out: str | Path | None = None,
) -> Figure:
    """``metric`` vs position within the sequence (bucket centres) at the longest evaluated
    length (or ``length``), one line per PE kind / RoPE scaling, ALiBi-paper style; the shaded
    region lies beyond L_train. Buckets without scored targets are left out."""
    frame = _eval_frame(source, whole_sequence=False)
    col = _auto(frame, col, _COL_AUTO)
    row = _auto(frame, row, _ROW_AUTO)
    q.check_columns(frame, [metric, hue, *(c for c in (col, row) if c)], "the plot")
    rows = _bucket_frame(frame, metric, length)
    total = rows.height
    rows = _finite(rows, metric)
    if rows.is_empty():
        raise QueryError(f"no finite per-position {metric!r} values to plot")
    _warn_if_mixed(rows, ["position", hue, col, row])
    order, palette = _hue_mapping(rows.get_column(hue).to_list(), hue)
    fig, items = _facets(rows, col, row, sharex=False)
    for ax, sub, title in items:
        _draw_positions(ax, sub, metric=metric, hue=hue, order=order, palette=palette)
        ax.set_title(title)
    _outer_labels(
        [ax for ax, _, _ in items], "position in sequence (bucket centre, tokens)", name_of(metric)
    )
    lengths = sorted(rows.get_column("length").unique().to_list())
    dropped = total - rows.height
    note = f"{dropped} of {total} buckets have no scored targets" if dropped else ""
    fig.suptitle(
        f"{name_of(metric).capitalize()} by position at length {', '.join(map(str, lengths))}\n"
        + _subtitle(
            _constant_note(rows, ["task.name"]),
            _spread_note(_n_seeds(rows, [hue, col, row])),
            note,
        ),
        fontsize=11,
    )
    _legend(fig, order, palette, name_of(hue))
    return _finish(fig, out)


# --------------------------------------------------------------------------------------------
# NTK


def _draw_drift_end(
    ax: Axes, final: pl.DataFrame, *, x: str, by: str, n_boot: int = 300
) -> list[str]:
    """End-of-training drift vs ``x`` on log-log, one fitted power law per ``by`` level."""
    order, palette = _hue_mapping(final.get_column(by).to_list(), by)
    notes = []
    for level in order:
        sub = _finite(final.filter(pl.col(by) == level), "value")
        xs = sub.get_column(x).cast(pl.Float64).to_numpy()
        ys = sub.get_column("value").cast(pl.Float64).to_numpy()
        color = palette[level]
        label = _fmt(level)
        ax.scatter(xs, ys, color=color, s=22, zorder=3)
        ok = (xs > 0) & (ys > 0)
        if np.unique(xs[ok]).size >= 2:
            seeds = sub.get_column("train.seed").to_list() if "train.seed" in sub.columns else None
            groups = [s for s, k in zip(seeds, ok, strict=True) if k] if seeds else None
            if groups is not None and len(set(groups)) < 2:
                groups = None
            fit = fit_power_law(xs[ok], ys[ok], n_boot=n_boot, groups=groups)
            grid = np.geomspace(xs[ok].min(), xs[ok].max(), 50)
            lo, hi = fit.band(grid)
            ax.plot(grid, fit.predict(grid), color=color, linewidth=1.6)
            if _has_ci(fit):
                ax.fill_between(grid, lo, hi, color=color, alpha=0.15, linewidth=0)
            slope, ci = -fit.b, (-fit.b_ci[1], -fit.b_ci[0])
            label = f"{label}: slope {slope:+.2f}{_ci_text(ci, fit.n, fit.n_groups, '+.2f')}"
            notes.append(f"{_fmt(level)} {slope:+.2f}")
        ax.plot([], [], color=color, marker="o", linewidth=1.6, label=label)
    _loglog(ax, final.get_column(x).to_list(), final.get_column("value").to_list())
    ax.legend(fontsize=8, title=f"{name_of(by)}: log-log slope", title_fontsize=8, loc="best")
    return notes


@_styled
def ntk_drift(
    source: Source,
    *,
    metrics: Sequence[str] = DRIFT_METRICS,
    group: str = "total",
    method: str = "none",
    hue: str = "model.width",
    x: str = "model.width",
    out: str | Path | None = None,
) -> Figure:
    """NTK drift metrics vs training step (log x), one colour per ``hue`` (width) and one dash
    per PE kind, plus a panel of end-of-training drift (the first metric) vs ``x`` on log-log
    with the fitted slope per PE kind. Train-kernel rows (probe_length == L_train) of the
    kernel as trained (``method``) and parameter ``group``; step 0 is left out (log axis)."""
    frame = _ntk_frame(source)
    q.check_columns(frame, [hue, x], "the plot")
    style = "model.position.kind" if "model.position.kind" in frame.columns else None
    per_metric = []
    for metric in metrics:
        rows = q.ntk_final(frame, metric, group=group, method=method, step="all")
        per_metric.append((metric, rows.filter(pl.col("step") > 0)))
    all_rows = pl.concat([r for _, r in per_metric], how="vertical_relaxed")
    order, palette = _hue_mapping(all_rows.get_column(hue).to_list(), hue)
    styles = sorted(all_rows.get_column(style).unique().drop_nulls().to_list()) if style else []
    if len(styles) < 2:
        style = None
    n = len(metrics) + 1
    ncols = 2 if n == 4 else min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = _grid(nrows, ncols, sharex=False, sharey=False)
    flat = list(axes.ravel())
    for ax, (metric, rows) in zip(flat, per_metric, strict=False):
        _lineplot(
            ax,
            rows,
            "step",
            "value",
            hue,
            order,
            palette,
            style=style,
            style_order=styles,
            marker=None,
        )
        _plain_log(ax, "x")
        values = rows.get_column("value").drop_nans().drop_nulls().to_numpy()
        if len(values) and values.min() > 0 and values.max() / values.min() > 30:
            _plain_log(ax, "y")
        ax.set_title(name_of(metric))
        ax.set_xlabel("training step")
        ax.set_ylabel(name_of(metric))
    end_ax = flat[len(metrics)]
    final = q.ntk_final(frame, metrics[0], group=group, method=method)
    by = style or ("model.position.kind" if "model.position.kind" in frame.columns else "label")
    notes = _draw_drift_end(end_ax, final, x=x, by=by)
    end_ax.set_title(f"end of training: {name_of(metrics[0])} vs {SHORT.get(x, name_of(x))}")
    end_ax.set_xlabel(name_of(x))
    end_ax.set_ylabel(name_of(metrics[0]))
    for ax in flat[n:]:
        ax.set_visible(False)
    seeds = _n_seeds(all_rows, ["step", hue, style, "metric"])
    fig.suptitle(
        f"NTK drift during training (parameter group: {group})\n"
        + _subtitle(
            _constant_note(all_rows, ["task.name", "train.length"]),
            _spread_note(seeds),
            "slopes: " + ", ".join(notes) if notes else "",
        ),
        fontsize=11,
    )
    _legend(
        fig,
        order,
        palette,
        name_of(hue),
        styles=styles if style else (),
        style_title=name_of(style) if style else "",
    )
    return _finish(fig, out)


def _cross_rows(frame: pl.DataFrame, metric: str, group: str) -> pl.DataFrame:
    rows = frame.filter((pl.col("metric") == metric) & (pl.col("group") == group))
    if rows.is_empty() and metric == "cross_train_cos_ratio":
        cross = frame.filter((pl.col("metric") == "k_cross_cos_mean") & (pl.col("group") == group))
        train = frame.filter(
            (pl.col("metric") == "k_train_cos_mean") & (pl.col("group") == group)
        ).select("trial_id", "step", "method", "factor", pl.col("value").alias("_train"))
        if not cross.is_empty() and not train.is_empty():
            keys = ["trial_id", "step", "method", "factor"]
            rows = (
                cross.join(train.unique(keys), on=keys, how="inner", nulls_equal=True)
                .with_columns((pl.col("value") / pl.col("_train")).alias("value"))
                .drop("_train")
                .with_columns(pl.lit(metric).alias("metric"))
            )
    if rows.is_empty():
        have = sorted(frame.get_column("metric").unique().drop_nulls().to_list())
        raise QueryError(
            f"no ntk rows for metric {metric!r} (group {group!r}); metrics present: "
            f"{', '.join(have) or '(none)'}"
        )
    return rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))


@_styled
def ntk_cross(
    source: Source,
    *,
    metrics: Sequence[str] = CROSS_METRICS,
    hue: str = "label",
    row: str | None = "auto",
    group: str = "total",
    out: str | Path | None = None,
) -> Figure:
    """Cross-kernel alignment vs probe length at the end of training: one column per metric
    (default ``k_cross_cos_mean`` and ``cross_train_cos_ratio`` = k_cross_cos_mean /
    k_train_cos_mean, computed when not stored), one line per PE kind / RoPE scaling, rows
    over widths when they vary."""
    frame = _ntk_frame(source)
    row = _auto(frame, row, _COL_AUTO + _ROW_AUTO)
    q.check_columns(frame, [hue, *([row] if row else [])], "the plot")
    parts = [_cross_rows(frame, m, group) for m in metrics]
    rows = pl.concat(parts, how="vertical_relaxed")
    _warn_if_mixed(rows, ["probe_length", "metric", hue, row])
    order, palette = _hue_mapping(rows.get_column(hue).to_list(), hue)
    col_levels = list(dict.fromkeys(metrics))
    fig, items = _facets(rows, "metric", row, sharey=False, col_levels=col_levels)
    for k, (ax, sub, _) in enumerate(items):
        metric = col_levels[k % len(col_levels)]
        _lineplot(ax, sub, "probe_length", "value", hue, order, palette)
        _log2_axis(ax, sub.get_column("probe_length").to_list())
        if "train.length" in sub.columns:
            _mark_train_length(ax, sub.get_column("train.length").unique().to_list())
        if metric.endswith("ratio"):
            ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1)
        title = name_of(metric)
        if row is not None and not sub.is_empty():
            title += f"\n{_facet_title(row, sub.get_column(row)[0])}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(name_of("probe_length"))
        ax.set_ylabel(name_of(metric))
    steps = sorted(rows.get_column("step").unique().to_list())
    fig.suptitle(
        "Kernel between long-probe and training positions vs probe length\n"
        + _subtitle(
            f"step {', '.join(map(str, steps))}",
            _constant_note(rows, ["task.name"]),
            _spread_note(_n_seeds(rows, ["probe_length", "metric", hue, row])),
        ),
        fontsize=11,
    )
    _legend(fig, order, palette, name_of(hue))
    return _finish(fig, out)


@_styled
def plot_kernel_matrices(
    K_train: Any,
    K_cross: Any,
    profile: Any,
    *,
    train_length: int | None = None,
    positions: Any = None,
    profile_label: str = "kernel profile",
    robust: bool = True,
    title: str = "Empirical NTK between positions",
    out: str | Path | None = None,
) -> Figure:
    """Heatmaps of a train kernel ``K_train`` (n x n over training positions) and a cross
    kernel ``K_cross`` (n x m: training positions x long-probe positions) on one colour scale,
    and a position ``profile`` (1-D over positions, or a mapping label -> array) with L_train
    dashed. ``robust``: colour limits at the 98th percentile of |K| (NTKs are heavy-tailed).

    Kernels are not stored by sweeps: compute them (e.g. ``rope_lab.ntk.position_kernel``) and
    pass arrays.
    """
    kt = np.asarray(K_train, dtype=float)
    kc = np.asarray(K_cross, dtype=float)
    if kt.ndim != 2 or kc.ndim != 2:
        raise ValueError(f"K_train and K_cross must be 2-D, got {kt.shape} and {kc.shape}")
    profiles = (
        {str(k): np.asarray(v, dtype=float) for k, v in profile.items()}
        if isinstance(profile, Mapping)
        else {"profile": np.asarray(profile, dtype=float)}
    )
    for name, p in profiles.items():
        if p.ndim != 1:
            raise ValueError(f"profile {name!r} must be 1-D, got shape {p.shape}")
    n_train = train_length if train_length is not None else kt.shape[0]
    fig = Figure(figsize=(15.5, 4.6), layout="constrained")
    gs = GridSpec(
        1, 3, figure=fig, width_ratios=[1, kc.shape[1] / max(kc.shape[0], 1) * 0.8 + 0.2, 1.1]
    )
    ax_t, ax_c, ax_p = (fig.add_subplot(gs[0, i]) for i in range(3))
    both = np.concatenate([kt[np.isfinite(kt)], kc[np.isfinite(kc)]])
    vmax = float(np.percentile(np.abs(both), 98 if robust else 100)) if both.size else 1.0
    vmax = vmax if vmax > 0 else 1.0
    clipped = bool(robust and both.size and float(np.max(np.abs(both))) > vmax)
    signed = bool(both.size and both.min() < 0)
    for ax, k, xlabel, ylabel, name in (
        (ax_t, kt, "training position j", "training position i", "K_train"),
        (ax_c, kc, "long-probe position j", "training position i", "K_cross"),
    ):
        norm = (
            mcolors.TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
            if signed
            else mcolors.Normalize(vmin=0.0, vmax=vmax)
        )
        im = ax.imshow(
            k,
            cmap="RdBu_r" if signed else "viridis",
            norm=norm,
            aspect="auto",
            interpolation="nearest",
            origin="upper",
        )
        ax.grid(False)
        fig.colorbar(
            im,
            ax=ax,
            shrink=0.85,
            label="kernel value" + (" (clipped at 98th pct.)" if clipped else ""),
            extend="both" if clipped and signed else "max" if clipped else "neither",
        )
        ax.set_title(f"{name} ({k.shape[0]}×{k.shape[1]})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if name == "K_cross" and k.shape[1] > n_train:
            ax.axvline(
                n_train - 0.5, color="white" if not signed else "0.2", linestyle="--", linewidth=1.2
            )
    palette = sns.color_palette("tab10", len(profiles))
    for (name, p), color in zip(profiles.items(), palette, strict=True):
        xs = np.asarray(positions, dtype=float) if positions is not None else np.arange(p.size)
        if xs.shape != p.shape:
            raise ValueError(f"positions has shape {xs.shape}, profile {name!r} {p.shape}")
        ax_p.plot(xs, p, color=color, linewidth=1.6, label=name)
    _mark_train_length(ax_p, [n_train])
    ax_p.set_xlabel("position (tokens)")
    ax_p.set_ylabel(profile_label)
    ax_p.set_title("position profile")
    if len(profiles) > 1:
        ax_p.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return _finish(fig, out)


def load_kernel_arrays(path: str | Path) -> dict[str, Any]:
    """Arrays for :func:`plot_kernel_matrices` from an ``.npz`` (keys K_train, K_cross,
    profile; optional positions, train_length, profile_label), or the first such file under a
    folder."""
    path = Path(path)
    candidates = [path] if path.is_file() else sorted(path.rglob("*.npz")) if path.is_dir() else []
    keys = ("K_train", "K_cross", "profile", "positions", "train_length", "profile_label")
    for f in candidates:
        try:
            with np.load(f, allow_pickle=False) as z:
                if not {"K_train", "K_cross", "profile"} <= set(z.files):
                    continue
                arrays: dict[str, Any] = {k: z[k] for k in keys if k in z.files}
        except (OSError, ValueError):
            continue
        if "train_length" in arrays:
            arrays["train_length"] = int(arrays["train_length"])
        if "profile_label" in arrays:
            arrays["profile_label"] = str(arrays["profile_label"])
        return arrays
    raise QueryError(
        f"no kernel arrays found in {path}: the kernel plot needs an .npz with K_train, K_cross "
        "and profile (kernels are not stored by sweeps; see rope_lab.plots.plot_kernel_matrices)"
    )


def kernel(source: str | Path, *, out: str | Path | None = None) -> Figure:
    """:func:`plot_kernel_matrices` of the arrays in an ``.npz`` file (or found in a folder)."""
    arrays = load_kernel_arrays(source)
    return plot_kernel_matrices(
        arrays["K_train"],
        arrays["K_cross"],
        arrays["profile"],
        train_length=arrays.get("train_length"),
        positions=arrays.get("positions"),
        profile_label=arrays.get("profile_label", "kernel profile"),
        title=f"Empirical NTK between positions ({Path(source).name})",
        out=out,
    )


# --------------------------------------------------------------------------------------------
# Scaling


def scaling_data(
    source: Source, metric: str, *, length_ratio: float = 1.0, method: str = "none"
) -> tuple[pl.DataFrame, str]:
    """One row per trial with ``metric`` (as a column) for scaling fits, and where it was read.

    Eval metrics (loss, perplexity, accuracy, exact_match, error_rate) at ``length_ratio`` x
    L_train for the PE as trained (no RoPE scaling stage, no fine-tuning); any other metric is
    an NTK metric at the end of training (train kernel, group total, ``method``).
    """
    if metric in EVAL_METRICS:
        frame = _eval_frame(source)
        trained = ~pl.col("label").str.contains("/", literal=True)
        if "finetune_steps" in frame.columns:
            trained = trained & (pl.col("finetune_steps").fill_null(0) == 0)
        rows = frame.filter(trained & (pl.col("length_ratio") == length_ratio))
        if rows.is_empty():
            have = sorted(frame.get_column("length_ratio").unique().drop_nulls().to_list())
            raise QueryError(f"no eval rows at length_ratio {length_ratio:g}; ratios: {have}")
        where = (
            "at L_train" if length_ratio == 1 else f"at {length_ratio:g} × L_train"
        ) + " (PE as trained)"
        return rows, where
    if not isinstance(source, pl.DataFrame) and q.ntk_table(source).is_empty():
        raise QueryError(
            f"unknown metric {metric!r}: eval metrics are {', '.join(EVAL_METRICS)}; "
            "NTK metrics need ntk rows, and these runs have none"
        )
    frame = _ntk_frame(source)
    rows = q.ntk_final(frame, metric, method=method).drop(metric, strict=False)
    return rows.rename({"value": metric}), "end of training (NTK, train kernel)"


def _draw_scaling(
    ax: Axes,
    rows: pl.DataFrame,
    *,
    x: str,
    hue: str | None,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
    offset: bool,
    n_boot: int,
) -> list[str]:
    texts = []
    levels = order if hue else [None]
    for level in levels:
        sub = rows if hue is None else rows.filter(pl.col(hue) == level)
        sub = _finite(sub, "_y")
        if sub.is_empty():
            continue
        color = palette.get(level, "C0") if hue else "C0"
        xs = sub.get_column(x).cast(pl.Float64).to_numpy()
        ys = sub.get_column("_y").cast(pl.Float64).to_numpy()
        ax.scatter(xs, ys, color=color, s=20, zorder=3, alpha=0.85)
        label = _fmt(level) if hue else "data"
        try:
            seeds = sub.get_column("train.seed").to_list() if "train.seed" in sub.columns else None
            groups = seeds if seeds and len(set(seeds)) > 1 else None
            fit = fit_power_law(xs, ys, offset=offset, n_boot=n_boot, groups=groups)
        except ValueError as e:
            label += " (no fit)"
            texts.append(f"{label}: {e}")
        else:
            grid = np.geomspace(xs.min(), xs.max(), 60)
            ax.plot(grid, fit.predict(grid), color=color, linewidth=1.6)
            lo, hi = fit.band(grid)
            if _has_ci(fit):
                ax.fill_between(grid, lo, hi, color=color, alpha=0.15, linewidth=0)
            off = f" + {fit.c:.2g}" if offset else ""
            label += f": b = {fit.b:.2f}{_ci_text(fit.b_ci, fit.n, fit.n_groups)}{off}"
        ax.plot([], [], color=color, marker="o", linewidth=1.6, label=label)
    _loglog(ax, rows.get_column(x).to_list(), rows.get_column("_y").to_list())
    ax.legend(fontsize=8, loc="best", title="fit y = a·x^(-b), b [95% CI]", title_fontsize=8)
    return texts


@_styled
def scaling(
    source: Source,
    *,
    metric: str = "loss",
    x: str = "model.width",
    hue: str | None = "model.position.kind",
    col: str | None = None,
    length_ratio: float = 1.0,
    method: str = "none",
    offset: bool = False,
    n_boot: int = 500,
    out: str | Path | None = None,
) -> Figure:
    """``metric`` vs ``x`` (width or n_params) on log-log with a fitted power law per ``hue``
    level and its bootstrap band (over seeds when there are several, else over points).

    Eval metrics (loss, perplexity, accuracy, exact_match, error_rate) are taken at
    ``length_ratio`` x L_train for the PE as trained; any other metric is an NTK metric at the
    end of training (method ``method``)."""
    rows, where = scaling_data(source, metric, length_ratio=length_ratio, method=method)
    rows = rows.rename({metric: "_y"})
    q.check_columns(rows, [x, *(c for c in (hue, col) if c)], "the plot")
    order, palette = _hue_mapping(rows.get_column(hue).to_list(), hue) if hue else ([], {})
    fig, items = _facets(rows, col, None, sharey=False, extra=0.4)
    for ax, sub, title in items:
        _draw_scaling(
            ax, sub, x=x, hue=hue, order=order, palette=palette, offset=offset, n_boot=n_boot
        )
        ax.set_title(title)
        ax.set_xlabel(name_of(x))
        ax.set_ylabel(name_of(metric))
    fig.suptitle(
        f"Scaling: {name_of(metric)} {where} vs {name_of(x)}\n"
        + _subtitle(
            _constant_note(rows, ["task.name", "train.length"]),
            f"{rows.height} trials, band: bootstrap 95% CI",
        ),
        fontsize=11,
    )
    return _finish(fig, out)


# --------------------------------------------------------------------------------------------
# Dashboard


@_styled
def summary(source: q.Source, *, threshold: float = 0.9, out: str | Path | None = None) -> Figure:
    """One page for a whole sweep: accuracy and loss vs length and loss by position (widest
    model), how far each curve keeps ``threshold`` x its L_train accuracy, loss vs width, the
    training loss curves, and the NTK drift and cross-kernel panels when ntk rows exist."""
    res = source if isinstance(source, q.Results) else q.results_of(source)
    evals = _eval_frame(res)
    buckets = _eval_frame(res, whole_sequence=False)
    ntk = q.ntk_table(res)
    has_ntk = not ntk.is_empty()
    fig = Figure(figsize=(19, 10.5 if not has_ntk else 14.5), layout="constrained")
    gs = GridSpec(3 if has_ntk else 2, 3, figure=fig)
    widths = (
        sorted(evals.get_column("model.width").unique().drop_nulls().to_list())
        if ("model.width" in evals.columns)
        else []
    )
    widest = evals.filter(pl.col("model.width") == widths[-1]) if widths else evals
    wtitle = f" (width {widths[-1]})" if widths else ""
    order, palette = _hue_mapping(evals.get_column("label").to_list(), "label")

    ax = fig.add_subplot(gs[0, 0])
    _draw_extrapolation(
        ax, widest, metric="accuracy", x="length", hue="label", order=order, palette=palette
    )
    ax.set(title=f"accuracy vs length{wtitle}", xlabel=name_of("length"), ylabel="accuracy")

    ax = fig.add_subplot(gs[0, 1])
    _draw_extrapolation(
        ax, widest, metric="loss", x="length", hue="label", order=order, palette=palette
    )
    ax.set(title=f"loss vs length{wtitle}", xlabel=name_of("length"), ylabel=name_of("loss"))

    ax = fig.add_subplot(gs[0, 2])
    summ = q.extrapolation_summary(evals, threshold=threshold)
    _draw_longest(ax, summ, order, palette, threshold)

    ax = fig.add_subplot(gs[1, 0])
    pos = _bucket_frame(buckets, "loss", "longest")
    pos_w = _finite(pos.filter(pl.col("model.width") == widths[-1]) if widths else pos, "loss")
    if not pos_w.is_empty():
        _draw_positions(ax, pos_w, metric="loss", hue="label", order=order, palette=palette)
    ax.set(
        title=f"loss by position at the longest length{wtitle}",
        xlabel="position (bucket centre, tokens)",
        ylabel=name_of("loss"),
    )

    ax = fig.add_subplot(gs[1, 1])
    if len(widths) >= 1 and "model.position.kind" in evals.columns:
        rows, where = scaling_data(res, "loss")
        rows = rows.rename({"loss": "_y"})
        k_order, k_pal = _hue_mapping(rows.get_column("model.position.kind").to_list(), "kind")
        _draw_scaling(
            ax,
            rows,
            x="model.width",
            hue="model.position.kind",
            order=k_order,
            palette=k_pal,
            offset=False,
            n_boot=200,
        )
        ax.set(
            title=f"loss {where} vs width", xlabel=name_of("model.width"), ylabel=name_of("loss")
        )

    ax = fig.add_subplot(gs[1, 2])
    train = res.with_config("train").collect()
    if not train.is_empty():
        train = train.with_columns(
            q.label_expr(train.columns, as_trained="none")
            if "method" in train.columns
            else pl.col("model.position.kind").alias("label")
        )
        t_order, t_pal = _hue_mapping(train.get_column("label").to_list(), "label")
        style = "model.width" if len(widths) > 1 else None
        _lineplot(
            ax,
            train,
            "step",
            "loss",
            "label",
            t_order,
            t_pal,
            style=style,
            style_order=widths if style else None,
            marker=None,
        )
        _plain_log(ax, "y")
        ax.set(
            title="training loss" + (" (dash = width)" if style else ""),
            xlabel="training step",
            ylabel=name_of("loss"),
        )
        for i, w in enumerate(widths if style else []):
            dash = _DASHES[i % len(_DASHES)]
            (line,) = ax.plot([], [], color="0.3", label=f"width {w}")
            if dash:
                line.set_dashes(dash)
        if style:
            ax.legend(fontsize=8, loc="upper right")

    if has_ntk:
        _ntk_dashboard_row(fig, gs, ntk)
    seeds = _n_seeds(evals, ["length", "label", "model.width"])
    fig.suptitle(
        f"Sweep summary: {', '.join(str(p) for p in res.run_dirs)}\n"
        + _subtitle(
            f"{evals.get_column('trial_id').n_unique()} trials",
            _constant_note(evals, ["task.name", "train.length"]),
            _spread_note(seeds),
        ),
        fontsize=12,
    )
    _legend(fig, order, palette, name_of("label"))
    return _finish(fig, out)


def _draw_longest(
    ax: Axes,
    summ: pl.DataFrame,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
    threshold: float,
) -> None:
    """Horizontal bars: longest length keeping the threshold, per label (and width)."""
    data = summ.filter(pl.col("longest_ratio").is_not_null())
    if data.is_empty():
        ax.text(0.5, 0.5, "no summary (no L_train rows)", ha="center", transform=ax.transAxes)
        return
    hue = (
        "model.width"
        if "model.width" in data.columns and q.varying_columns(data, ["model.width"])
        else None
    )
    pdf = data.select("label", "longest_ratio", *([hue] if hue else [])).to_pandas()
    present = [v for v in order if v in set(pdf["label"])]
    kw: dict[str, Any] = {}
    if hue:
        w_order, w_pal = _hue_mapping(pdf[hue].tolist(), hue)
        kw = {"hue": hue, "hue_order": w_order, "palette": w_pal}
    else:
        kw = {"hue": "label", "hue_order": present, "palette": palette, "legend": False}
    sns.barplot(
        data=pdf,
        y="label",
        x="longest_ratio",
        order=present,
        errorbar=("se", 1),
        ax=ax,
        orient="h",
        **kw,
    )
    ax.set_xscale("log", base=2)
    ratios = sorted(set(pdf["longest_ratio"]))
    ax.xaxis.set_major_locator(ticker.FixedLocator(ratios))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlim(min(ratios) / 1.5, max(ratios) * 1.3)
    ax.set(
        title=f"longest length keeping ≥ {threshold:.0%} of L_train accuracy",
        xlabel="longest length / L_train",
        ylabel="",
    )
    legend = ax.get_legend()
    if hue and legend is not None:
        legend.set_title("width")


def _ntk_dashboard_row(fig: Figure, gs: GridSpec, ntk: pl.DataFrame) -> None:
    metrics = set(ntk.get_column("metric").unique().to_list())
    ax = fig.add_subplot(gs[2, 0])
    if "distance_from_init" in metrics:
        rows = q.ntk_final(ntk, "distance_from_init", step="all").filter(pl.col("step") > 0)
        order, palette = _hue_mapping(rows.get_column("model.width").to_list(), "model.width")
        kinds = sorted(rows.get_column("model.position.kind").unique().to_list())
        _lineplot(
            ax,
            rows,
            "step",
            "value",
            "model.width",
            order,
            palette,
            style="model.position.kind" if len(kinds) > 1 else None,
            style_order=kinds,
            marker=None,
        )
        _plain_log(ax, "x")
        for w in order:
            ax.plot([], [], color=palette[w], label=f"width {_fmt(w)}")
        ax.legend(fontsize=8, loc="best")
        ax.set(
            title="NTK distance from init (dash = PE kind)",
            xlabel="training step",
            ylabel=name_of("distance_from_init"),
        )
        ax = fig.add_subplot(gs[2, 1])
        final = q.ntk_final(ntk, "distance_from_init")
        _draw_drift_end(ax, final, x="model.width", by="model.position.kind", n_boot=200)
        ax.set(
            title="end-of-training drift vs width",
            xlabel=name_of("model.width"),
            ylabel=name_of("distance_from_init"),
        )
    ax = fig.add_subplot(gs[2, 2])
    try:
        rows = _cross_rows(ntk, "cross_train_cos_ratio", "total")
    except QueryError:
        ax.text(0.5, 0.5, "no cross-kernel rows", ha="center", transform=ax.transAxes)
        return
    order, palette = _hue_mapping(rows.get_column("label").to_list(), "label")
    _lineplot(ax, rows, "probe_length", "value", "label", order, palette)
    _log2_axis(ax, rows.get_column("probe_length").to_list())
    if "train.length" in rows.columns:
        _mark_train_length(ax, rows.get_column("train.length").unique().to_list())
    ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1)
    ax.set(
        title="cross / train kernel cosine (end of training)",
        xlabel=name_of("probe_length"),
        ylabel=name_of("cross_train_cos_ratio"),
    )


# --------------------------------------------------------------------------------------------
# Dispatch


_PLOTS: Final[Mapping[str, Callable[..., Figure]]] = {
    "extrapolation": extrapolation,
    "positions": positions,
    "ntk-drift": ntk_drift,
    "ntk-cross": ntk_cross,
    "kernel": kernel,
    "scaling": scaling,
    "summary": summary,
}


def plot_options(kind: str) -> list[str]:
    """Keyword options of plot ``kind`` (``metric`` stands for ``metrics`` of the NTK plots)."""
    if kind not in _PLOTS:
        raise QueryError(f"unknown plot kind {kind!r}; kinds are: {', '.join(KINDS)}")
    names = [p for p in inspect.signature(_PLOTS[kind]).parameters if p not in ("source", "out")]
    return ["metric" if n == "metrics" else n for n in names]


def plot(kind: str, source: Any, *, out: str | Path | None = None, **options: Any) -> Figure:
    """Draw plot ``kind`` (one of KINDS) of ``source`` and write it to ``out`` if given.

    ``options`` are that function's keyword arguments (``metric="m"`` becomes
    ``metrics=("m",)`` for the NTK plots). Unknown kinds and options raise QueryError.
    """
    accepted = plot_options(kind)
    unknown = [k for k in options if k not in accepted]
    if unknown:
        raise QueryError(
            f"plot kind {kind!r} does not take {', '.join(unknown)}; it takes: "
            f"{', '.join(accepted) or '(no options)'}"
        )
    func = _PLOTS[kind]
    if "metric" in options and "metrics" in inspect.signature(func).parameters:
        options["metrics"] = (options.pop("metric"),)
    if isinstance(source, list | tuple) and len(source) == 1:
        source = source[0]
    if kind == "kernel" and isinstance(source, list | tuple):
        raise QueryError("the kernel plot takes one .npz file or folder")
    return func(source, out=out, **options)

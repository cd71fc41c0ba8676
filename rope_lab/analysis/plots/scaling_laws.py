"""Scaling laws: one row per trial of an eval or NTK metric, and ``scaling`` (the metric vs
width or n_params on log-log with a fitted power law and its bootstrap band per hue level)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.fits import fit_power_law
from rope_lab.analysis.plots.axes import draw_fit, loglog
from rope_lab.analysis.plots.frames import Source, eval_frame, finite_rows, ntk_frame
from rope_lab.analysis.plots.labels import ci_text, constant_note, format_value, name_of, subtitle
from rope_lab.analysis.plots.layout import facets, finish
from rope_lab.analysis.plots.style import hue_mapping, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

EVAL_METRICS: Final = (
    "loss",
    "perplexity",
    "accuracy",
    "exact_match",
    "error_rate",
    "bits_per_byte",
)


def scaling_data(
    source: Source, metric: str, *, length_ratio: float = 1.0, method: str = "none"
) -> tuple[pl.DataFrame, str]:
    """One row per trial with ``metric`` (as a column) for scaling fits, and where it was read.

    Eval metrics (loss, perplexity, accuracy, exact_match, error_rate, bits_per_byte) at
    ``length_ratio`` x L_train for the PE as trained (no RoPE scaling stage, no fine-tuning);
    any other metric is an NTK metric at the end of training (train kernel, group total,
    ``method``).
    """
    if metric in EVAL_METRICS:
        frame = eval_frame(source)
        trained = pl.col("label_method").is_null() & (pl.col("label_finetune") == 0)
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
    frame = ntk_frame(source)
    rows = q.ntk_final(frame, metric, method=method).drop(metric, strict=False)
    return rows.rename({"value": metric}), "end of training (NTK, train kernel)"


def draw_scaling(
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
    """Points of ``_y`` vs ``x`` on log-log with a fitted power law and its band per ``hue``
    level; the reasons of the levels that could not be fitted."""
    texts = []
    levels = order if hue else [None]
    for level in levels:
        sub = rows if hue is None else rows.filter(pl.col(hue) == level)
        sub = finite_rows(sub, "_y")
        if sub.is_empty():
            continue
        color = palette.get(level, "C0") if hue else "C0"
        xs = sub.get_column(x).cast(pl.Float64).to_numpy()
        ys = sub.get_column("_y").cast(pl.Float64).to_numpy()
        ax.scatter(xs, ys, color=color, s=20, zorder=3, alpha=0.85)
        label = format_value(level) if hue else "data"
        try:
            seeds = sub.get_column("train.seed").to_list() if "train.seed" in sub.columns else None
            groups = seeds if seeds and len(set(seeds)) > 1 else None
            fit = fit_power_law(xs, ys, offset=offset, n_boot=n_boot, groups=groups)
        except ValueError as e:
            label += " (no fit)"
            texts.append(f"{label}: {e}")
        else:
            draw_fit(ax, fit, xs, color, points=60)
            off = f" + {fit.c:.2g}" if offset else ""
            label += f": b = {fit.b:.2f}{ci_text(fit.b_ci, fit.n, fit.n_groups)}{off}"
        ax.plot([], [], color=color, marker="o", linewidth=1.6, label=label)
    loglog(ax, rows.get_column(x).to_list(), rows.get_column("_y").to_list())
    ax.legend(fontsize=8, loc="best", title="fit y = a·x^(-b), b [95% CI]", title_fontsize=8)
    return texts


@PLOTS.register("scaling")
@styled
def scaling(
    source: Source,
    *,
    metric: str | None = None,
    x: str = "model.width",
    hue: str | None = "model.position.kind",
    col: str | None = None,
    length_ratio: float = 1.0,
    method: str = "none",
    offset: bool = False,
    n_boot: int = 500,
    out: str | Path | None = None,
) -> Figure:
    """Metric vs width, log-log, power-law fit.

    ``metric`` vs ``x`` (width or n_params) on log-log with a fitted power law per ``hue``
    level and its bootstrap band (over seeds when there are several, else over points).

    Eval metrics (loss, perplexity, accuracy, exact_match, error_rate, bits_per_byte) are
    taken at ``length_ratio`` x L_train for the PE as trained; any other metric is an NTK
    metric at the end of training (method ``method``). Without ``metric``: bits per byte when
    every eval row has one (text language models), else loss (`query.loss_metric`).
    """
    if metric is None:
        metric = q.loss_metric(eval_frame(source))
    rows, where = scaling_data(source, metric, length_ratio=length_ratio, method=method)
    rows = rows.rename({metric: "_y"})
    q.check_columns(rows, [x, *(c for c in (hue, col) if c)], "the plot")
    order, palette = hue_mapping(rows, hue) if hue else ([], {})
    fig, items = facets(rows, col, None, sharey=False, extra=0.4)
    for ax, sub, title in items:
        draw_scaling(
            ax, sub, x=x, hue=hue, order=order, palette=palette, offset=offset, n_boot=n_boot
        )
        ax.set_title(title)
        ax.set_xlabel(name_of(x))
        ax.set_ylabel(name_of(metric))
    fig.suptitle(
        f"Scaling: {name_of(metric)} {where} vs {name_of(x)}\n"
        + subtitle(
            constant_note(rows, ["task.name", "train.length"]),
            f"{rows.height} trials, band: bootstrap 95% CI",
        ),
        fontsize=11,
    )
    return finish(fig, out)

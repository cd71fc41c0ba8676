"""Drawing on one panel: mean lines with their seed band, log2 / log-log / plain-log axes, the
L_train marker and the unit range of rate metrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib import ticker
from matplotlib.axes import Axes

from rope_lab.analysis.fits import PowerLawFit
from rope_lab.analysis.plots.frames import finite_rows
from rope_lab.analysis.plots.style import DASHES, SCALED_DASH, TEMPERATURE_DASH, dashed_labels


def lineplot(
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
    """Mean ``y`` vs ``x`` per ``hue`` level with a ± 1 s.e. band over seeds (seaborn), finite
    values only; scalings applied at evaluation dashed (RoPE) or dotted (the log-length
    temperature, :func:`~rope_lab.analysis.plots.style.curve_dash`) when ``hue`` is the label, else
    dashes by ``style``."""
    cols = list(dict.fromkeys(c for c in (x, y, hue, style) if c))
    finite = finite_rows(frame, y)
    if finite.is_empty():
        return
    pdf = finite.select(cols).to_pandas()
    present = set(pdf[hue]) if hue else set()
    kw: dict[str, Any] = {}
    if hue:
        kw.update(hue=hue, hue_order=[v for v in (order or []) if v in present], palette=palette)
    if style is None and hue == "label":
        dashed = dashed_labels(finite, hue)
        lines = ("", SCALED_DASH, TEMPERATURE_DASH)
        pdf["_dash"] = [lines.index(dashed.get(v, "")) for v in pdf[hue]]
        style, style_order = "_dash", list(range(len(lines)))
        kw.update(style=style, style_order=style_order, dashes=dict(enumerate(lines)))
    elif style:
        present_styles = set(pdf[style])
        levels = [s for s in (style_order or sorted(present_styles)) if s in present_styles]
        kw.update(
            style=style,
            style_order=levels,
            dashes={s: DASHES[i % len(DASHES)] for i, s in enumerate(style_order or levels)},
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


def draw_fit(ax: Axes, fit: PowerLawFit, xs: np.ndarray, color: Any, *, points: int) -> None:
    """The fitted power law over the range of ``xs`` (``points`` log-spaced values) and its
    bootstrap band where the interval means something (>= 3 resampling units, > 2 points)."""
    grid = np.geomspace(xs.min(), xs.max(), points)
    ax.plot(grid, fit.predict(grid), color=color, linewidth=1.6)
    if fit.n > 2 and fit.n_groups >= 3 and fit.b_ci[1] > fit.b_ci[0]:
        lo, hi = fit.band(grid)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.15, linewidth=0)


def loglog(ax: Axes, xs: Sequence[float], ys: Sequence[float]) -> None:
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


def plain_log(ax: Axes, axis: str) -> None:
    """log10 scale labelled 1, 10, 100 (or 0.2, 0.5, 1) instead of mathtext powers."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(ticker.LogLocator(base=10, subs=(1.0,) if axis == "x" else (1, 2, 5)))
    a.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(ticker.NullFormatter())


def log2_axis(ax: Axes, values: Iterable[float], axis: str = "x") -> None:
    """log2 scale with the data's ``values`` as ticks (when at most 12), labelled plainly."""
    ticks = sorted({float(v) for v in values if v is not None and v > 0})
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    if ticks and len(ticks) <= 12:
        a.set_major_locator(ticker.FixedLocator(ticks))
    a.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_locator(ticker.NullLocator())


def mark_train_length(ax: Axes, values: Iterable[float], *, text: str = "L_train") -> None:
    """A dashed vertical line labelled ``text`` at each of ``values``."""
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


def unit_ylim(ax: Axes, metric: str) -> None:
    """y from 0 to 1 (with a margin) for rate metrics such as accuracy."""
    if metric in ("accuracy", "exact_match", "error_rate"):
        ax.set_ylim(-0.03, 1.03)

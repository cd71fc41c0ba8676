"""NTK figures from the ``ntk`` table: ``ntk_drift`` (drift metrics vs training step and the
end-of-training drift vs width with fitted slopes) and ``ntk_cross`` (long-probe vs train
kernel alignment vs probe length).

The drift metrics are those registered with ``drift`` in ``registry.NTK_METRICS``; reading the
registry imports ``rope_lab.ntk.metrics`` (numpy only), never JAX."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.fits import fit_power_law
from rope_lab.analysis.plots.axes import (
    draw_fit,
    lineplot,
    log2_axis,
    loglog,
    mark_train_length,
    plain_log,
)
from rope_lab.analysis.plots.frames import (
    COL_AUTO,
    ROW_AUTO,
    Source,
    auto_facet,
    finite_rows,
    n_seeds,
    ntk_frame,
    warn_if_mixed,
)
from rope_lab.analysis.plots.labels import (
    SHORT,
    ci_text,
    constant_note,
    facet_title,
    format_value,
    name_of,
    spread_note,
    subtitle,
)
from rope_lab.analysis.plots.layout import facets, finish, panel_grid
from rope_lab.analysis.plots.style import dashed_labels, figure_legend, hue_mapping, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import NTK_METRICS, PLOTS

CROSS_METRICS: Final = ("k_cross_cos_mean", "cross_train_cos_ratio")


def drift_metrics(
    frame: pl.DataFrame | None = None, *, group: str = "total", method: str = "none"
) -> tuple[str, ...]:
    """The NTK metrics registered with ``drift``, in registry order; given an ntk ``frame``,
    those it has rows of for ``group`` and ``method`` (QueryError when none)."""
    names = tuple(name for name, m in NTK_METRICS.items() if getattr(m, "drift", False))
    if frame is None:
        return names
    rows = frame.filter((pl.col("group") == group) & (pl.col("method") == method))
    present = set(rows.get_column("metric").unique().drop_nulls().to_list())
    if not any(name in present for name in names):
        have = sorted(frame.get_column("metric").unique().drop_nulls().to_list())
        raise QueryError(
            f"no ntk rows of a drift metric ({', '.join(names)}) for group {group!r}, method "
            f"{method!r}; metrics present: {', '.join(have) or '(none)'}"
        )
    return tuple(name for name in names if name in present)


def draw_drift_end(
    ax: Axes, final: pl.DataFrame, *, x: str, by: str, n_boot: int = 300
) -> list[str]:
    """End-of-training drift vs ``x`` on log-log, one fitted power law per ``by`` level."""
    order, palette = hue_mapping(final, by)
    notes = []
    for level in order:
        sub = finite_rows(final.filter(pl.col(by) == level), "value")
        xs = sub.get_column(x).cast(pl.Float64).to_numpy()
        ys = sub.get_column("value").cast(pl.Float64).to_numpy()
        color = palette[level]
        label = format_value(level)
        ax.scatter(xs, ys, color=color, s=22, zorder=3)
        ok = (xs > 0) & (ys > 0)
        if np.unique(xs[ok]).size >= 2:
            seeds = sub.get_column("train.seed").to_list() if "train.seed" in sub.columns else None
            groups = [s for s, k in zip(seeds, ok, strict=True) if k] if seeds else None
            if groups is not None and len(set(groups)) < 2:
                groups = None
            fit = fit_power_law(xs[ok], ys[ok], n_boot=n_boot, groups=groups)
            draw_fit(ax, fit, xs[ok], color, points=50)
            slope, ci = -fit.b, (-fit.b_ci[1], -fit.b_ci[0])
            label = f"{label}: slope {slope:+.2f}{ci_text(ci, fit.n, fit.n_groups, '+.2f')}"
            notes.append(f"{format_value(level)} {slope:+.2f}")
        ax.plot([], [], color=color, marker="o", linewidth=1.6, label=label)
    loglog(ax, final.get_column(x).to_list(), final.get_column("value").to_list())
    ax.legend(fontsize=8, title=f"{name_of(by)}: log-log slope", title_fontsize=8, loc="best")
    return notes


@PLOTS.register("ntk-drift")
@styled
def ntk_drift(
    source: Source,
    *,
    metrics: Sequence[str] | None = None,
    group: str = "total",
    method: str = "none",
    hue: str = "model.width",
    x: str = "model.width",
    out: str | Path | None = None,
) -> Figure:
    """NTK drift vs step and its slope vs width.

    NTK drift metrics vs training step (log x), one colour per ``hue`` (width) and one dash
    per PE kind, plus a panel of end-of-training drift (the first metric) vs ``x`` on log-log
    with the fitted slope per PE kind. Train-kernel rows (probe_length == L_train) of the
    kernel as trained (``method``) and parameter ``group``; step 0 is left out (log axis).
    ``metrics`` default: the registered drift metrics the rows have (:func:`drift_metrics`).
    """
    frame = ntk_frame(source)
    q.check_columns(frame, [hue, x], "the plot")
    if metrics is None:
        metrics = drift_metrics(frame, group=group, method=method)
    style = "model.position.kind" if "model.position.kind" in frame.columns else None
    per_metric = []
    for metric in metrics:
        rows = q.ntk_final(frame, metric, group=group, method=method, step="all")
        per_metric.append((metric, rows.filter(pl.col("step") > 0)))
    all_rows = pl.concat([r for _, r in per_metric], how="vertical_relaxed")
    order, palette = hue_mapping(all_rows, hue)
    styles = sorted(all_rows.get_column(style).unique().drop_nulls().to_list()) if style else []
    if len(styles) < 2:
        style = None
    n = len(metrics) + 1
    ncols = 2 if n == 4 else min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = panel_grid(nrows, ncols, sharex=False, sharey=False)
    flat = list(axes.ravel())
    for ax, (metric, rows) in zip(flat, per_metric, strict=False):
        lineplot(
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
        plain_log(ax, "x")
        values = rows.get_column("value").drop_nans().drop_nulls().to_numpy()
        if len(values) and values.min() > 0 and values.max() / values.min() > 30:
            plain_log(ax, "y")
        ax.set_title(name_of(metric))
        ax.set_xlabel("training step")
        ax.set_ylabel(name_of(metric))
    end_ax = flat[len(metrics)]
    final = q.ntk_final(frame, metrics[0], group=group, method=method)
    by = style or ("model.position.kind" if "model.position.kind" in frame.columns else "label")
    notes = draw_drift_end(end_ax, final, x=x, by=by)
    end_ax.set_title(f"end of training: {name_of(metrics[0])} vs {SHORT.get(x, name_of(x))}")
    end_ax.set_xlabel(name_of(x))
    end_ax.set_ylabel(name_of(metrics[0]))
    for ax in flat[n:]:
        ax.set_visible(False)
    seeds = n_seeds(all_rows, ["step", hue, style, "metric"])
    fig.suptitle(
        f"NTK drift during training (parameter group: {group})\n"
        + subtitle(
            constant_note(all_rows, ["task.name", "train.length"]),
            spread_note(seeds),
            "slopes: " + ", ".join(notes) if notes else "",
        ),
        fontsize=11,
    )
    figure_legend(
        fig,
        order,
        palette,
        name_of(hue),
        styles=styles if style else (),
        style_title=name_of(style) if style else "",
    )
    return finish(fig, out)


def cross_rows(frame: pl.DataFrame, metric: str, group: str) -> pl.DataFrame:
    """End-of-training rows of cross-kernel ``metric`` for parameter ``group``; the
    ``cross_train_cos_ratio`` is computed from the two cosines when not stored."""
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


@PLOTS.register("ntk-cross")
@styled
def ntk_cross(
    source: Source,
    *,
    metrics: Sequence[str] = CROSS_METRICS,
    hue: str = "label",
    row: str | None = "auto",
    group: str = "total",
    out: str | Path | None = None,
) -> Figure:
    """Long-probe vs train kernel alignment vs probe length.

    Cross-kernel alignment vs probe length at the end of training: one column per metric
    (default ``k_cross_cos_mean`` and ``cross_train_cos_ratio`` = k_cross_cos_mean /
    k_train_cos_mean, computed when not stored), one line per PE kind / RoPE scaling, rows
    over widths when they vary.
    """
    frame = ntk_frame(source)
    row = auto_facet(frame, row, COL_AUTO + ROW_AUTO)
    q.check_columns(frame, [hue, *([row] if row else [])], "the plot")
    parts = [cross_rows(frame, m, group) for m in metrics]
    rows = pl.concat(parts, how="vertical_relaxed")
    warn_if_mixed(rows, ["probe_length", "metric", hue, row])
    order, palette = hue_mapping(rows, hue)
    col_levels = list(dict.fromkeys(metrics))
    fig, items = facets(rows, "metric", row, sharey=False, col_levels=col_levels)
    for k, (ax, sub, _) in enumerate(items):
        metric = col_levels[k % len(col_levels)]
        lineplot(ax, sub, "probe_length", "value", hue, order, palette)
        log2_axis(ax, sub.get_column("probe_length").to_list())
        if "train.length" in sub.columns:
            mark_train_length(ax, sub.get_column("train.length").unique().to_list())
        if metric.endswith("ratio"):
            ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1)
        title = name_of(metric)
        if row is not None and not sub.is_empty():
            title += f"\n{facet_title(row, sub.get_column(row)[0])}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(name_of("probe_length"))
        ax.set_ylabel(name_of(metric))
    steps = sorted(rows.get_column("step").unique().to_list())
    fig.suptitle(
        "Kernel between long-probe and training positions vs probe length\n"
        + subtitle(
            f"step {', '.join(map(str, steps))}",
            constant_note(rows, ["task.name"]),
            spread_note(n_seeds(rows, ["probe_length", "metric", hue, row])),
        ),
        fontsize=11,
    )
    figure_legend(fig, order, palette, name_of(hue), dashed=dashed_labels(rows, hue))
    return finish(fig, out)

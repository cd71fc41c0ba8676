"""Eval metrics as curves: ``extrapolation`` (metric vs evaluation length) and ``positions``
(metric vs position within the sequence at one length), one line per PE kind / RoPE scaling,
faceted by width, L_train, task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import polars as pl
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.axes import lineplot, log2_axis, mark_train_length, unit_ylim
from rope_lab.analysis.plots.frames import (
    COL_AUTO,
    ROW_AUTO,
    Source,
    auto_facet,
    eval_frame,
    finite_rows,
    n_seeds,
    warn_if_mixed,
)
from rope_lab.analysis.plots.labels import constant_note, name_of, spread_note, subtitle
from rope_lab.analysis.plots.layout import facets, finish, outer_labels
from rope_lab.analysis.plots.style import dashed_labels, figure_legend, hue_mapping, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

LENGTH_AXES: Final = frozenset({"length", "length_ratio", "probe_length"})


def draw_extrapolation(
    ax: Axes,
    sub: pl.DataFrame,
    *,
    metric: str,
    x: str,
    hue: str,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
) -> None:
    """One extrapolation panel: ``metric`` vs ``x`` per ``hue`` level, log2 length axis, L_train
    marked."""
    lineplot(ax, sub, x, metric, hue, order, palette)
    if x in LENGTH_AXES:
        log2_axis(ax, sub.get_column(x).to_list())
    if x == "length" and "train.length" in sub.columns:
        mark_train_length(ax, sub.get_column("train.length").unique().to_list())
    elif x == "length_ratio":
        mark_train_length(ax, [1.0])
    unit_ylim(ax, metric)


@PLOTS.register("extrapolation")
@styled
def extrapolation(
    source: Source,
    *,
    metric: str | None = None,
    x: str = "length",
    hue: str = "label",
    col: str | None = "auto",
    row: str | None = "auto",
    out: str | Path | None = None,
) -> Figure:
    """Metric vs evaluation length per PE kind / RoPE scaling.

    ``metric`` vs evaluation length, one line per PE kind / RoPE scaling (``label``). Facets:
    ``col``/``row`` columns ("auto": width as columns, L_train / task / parametrization / depth
    as rows when they vary; None: no facet). ``x="length_ratio"`` puts L_train at 1. Without
    ``metric`` each task is read by its own (`query.default_metric`: loss for language-model
    tasks, accuracy otherwise); when the tasks' metrics differ, ``task.name`` becomes the
    ``row`` facet (the ``col`` facet when ``row`` is another column; QueryError when both are)
    and each task's panels plot its metric on their own y axis.
    """
    frame = eval_frame(source)
    metrics = q.task_metrics(frame) if metric is None else {None: metric}
    mixed = len(set(metrics.values())) > 1
    if mixed and "task.name" not in (col, row):
        if row in ("auto", None):
            row = "task.name"
        elif col in ("auto", None):
            col = "task.name"
        else:
            raise QueryError(
                f"the tasks are read by different metrics ({metrics}): facet them by "
                "task.name (--row or --col) or give --metric"
            )
    col = auto_facet(frame, col, COL_AUTO)
    row = auto_facet(frame, row, ROW_AUTO)
    used = sorted(set(metrics.values()))
    q.check_columns(frame, [x, *used, hue, *(c for c in (col, row) if c)], "the plot")
    if mixed:
        finite = pl.lit(False)
        for task, m in metrics.items():
            value = pl.col(m).cast(pl.Float64)
            finite = finite | (
                (pl.col("task.name") == task) & value.is_not_null() & value.is_finite()
            )
        frame = frame.filter(finite)
    else:
        frame = finite_rows(frame, used[0])
    if frame.is_empty():
        raise QueryError(f"no finite {' or '.join(map(repr, used))} values to plot")
    warn_if_mixed(frame, [x, hue, col, row])
    order, palette = hue_mapping(frame, hue)
    fig, items = facets(frame, col, row, sharey=not mixed)
    for ax, sub, title in items:
        tasks = sub.get_column("task.name").unique().to_list() if mixed else [None]
        m = metrics[tasks[0]] if mixed and len(tasks) == 1 else used[0]
        if not sub.is_empty():
            draw_extrapolation(ax, sub, metric=m, x=x, hue=hue, order=order, palette=palette)
        ax.set_title(title)
    outer_labels([ax for ax, _, _ in items], name_of(x), name_of(used[0]))
    if mixed:
        for ax, sub, _ in items:
            tasks = sub.get_column("task.name").unique().to_list()
            spec = ax.get_subplotspec()
            if len(tasks) == 1 and spec is not None and spec.is_first_col():
                ax.set_ylabel(name_of(metrics[tasks[0]]))
    seeds = n_seeds(frame, [x, hue, col, row])
    what = " / ".join(name_of(m) for m in used)
    fig.suptitle(
        f"Length extrapolation: {what} vs {name_of(x)}\n"
        + subtitle(constant_note(frame, ["task.name", "train.length"]), spread_note(seeds)),
        fontsize=11,
    )
    figure_legend(fig, order, palette, name_of(hue), dashed=dashed_labels(frame, hue))
    return finish(fig, out)


def bucket_frame(frame: pl.DataFrame, metric: str, length: int | str) -> pl.DataFrame:
    """Per-position-bucket rows at ``length`` (or each trial's longest) with a ``position``
    column: the centre of the bucket."""
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


def draw_positions(
    ax: Axes,
    sub: pl.DataFrame,
    *,
    metric: str,
    hue: str,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
) -> None:
    """One positions panel: ``metric`` vs bucket centre per ``hue`` level, positions beyond
    L_train shaded."""
    lineplot(ax, sub, "position", metric, hue, order, palette)
    lengths = sub.get_column("length").unique().drop_nulls().to_list()
    top = max(lengths) if lengths else None
    if "train.length" in sub.columns:
        trains = sub.get_column("train.length").unique().drop_nulls().to_list()
        mark_train_length(ax, trains)
        if trains and top and top > min(trains):
            ax.axvspan(min(trains), top, color="0.5", alpha=0.07, zorder=0, linewidth=0)
    if top:
        ax.set_xlim(0, top)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=6, integer=True))
    unit_ylim(ax, metric)


@PLOTS.register("positions")
@styled
def positions(
    source: Source,
    *,
    metric: str | None = None,
    length: int | str = "longest",
    hue: str = "label",
    col: str | None = "auto",
    row: str | None = "auto",
    out: str | Path | None = None,
) -> Figure:
    """Loss by position at the longest length.

    ``metric`` vs position within the sequence (bucket centres) at the longest evaluated
    length (or ``length``), one line per PE kind / RoPE scaling, ALiBi-paper style; the shaded
    region lies beyond L_train. Buckets without scored targets are left out. Without
    ``metric``: bits per byte when every row has one (text language models), else the loss in
    nats per scored token (`query.loss_metric`).
    """
    frame = eval_frame(source, whole_sequence=False)
    if metric is None:
        metric = q.loss_metric(frame.filter(pl.col("position_bucket").is_not_null()))
    col = auto_facet(frame, col, COL_AUTO)
    row = auto_facet(frame, row, ROW_AUTO)
    q.check_columns(frame, [metric, hue, *(c for c in (col, row) if c)], "the plot")
    rows = bucket_frame(frame, metric, length)
    total = rows.height
    rows = finite_rows(rows, metric)
    if rows.is_empty():
        raise QueryError(f"no finite per-position {metric!r} values to plot")
    warn_if_mixed(rows, ["position", hue, col, row])
    order, palette = hue_mapping(rows, hue)
    fig, items = facets(rows, col, row, sharex=False)
    for ax, sub, title in items:
        draw_positions(ax, sub, metric=metric, hue=hue, order=order, palette=palette)
        ax.set_title(title)
    outer_labels(
        [ax for ax, _, _ in items], "position in sequence (bucket centre, tokens)", name_of(metric)
    )
    lengths = sorted(rows.get_column("length").unique().to_list())
    dropped = total - rows.height
    note = f"{dropped} of {total} buckets have no scored targets" if dropped else ""
    fig.suptitle(
        f"{name_of(metric).capitalize()} by position at length {', '.join(map(str, lengths))}\n"
        + subtitle(
            constant_note(rows, ["task.name"]),
            spread_note(n_seeds(rows, [hue, col, row])),
            note,
        ),
        fontsize=11,
    )
    figure_legend(fig, order, palette, name_of(hue), dashed=dashed_labels(rows, hue))
    return finish(fig, out)

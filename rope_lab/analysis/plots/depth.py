"""``depth``: the needle-in-a-haystack heatmap, accuracy by evaluation length x needle depth,
one panel per curve (PE kind / RoPE scaling), from the rows of ``eval.depths``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.curves import with_labels
from rope_lab.analysis.plots.frames import Source, finite_rows, warn_if_mixed
from rope_lab.analysis.plots.labels import facet_title, name_of
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.style import label_key, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

ROWS = ("task.name", "model.width", "train.length")  # panel rows: the first that varies
RATES = ("accuracy", "exact_match")  # drawn on [0, 1]


def depth_frame(source: Source) -> pl.DataFrame:
    """The whole-sequence teacher-forced rows at a set needle depth (``eval.depths``), with
    labels; QueryError when the runs have none."""
    if isinstance(source, pl.DataFrame):
        frame = source.filter(pl.col("depth").is_not_null())
    else:
        frame = q.eval_table(source, depths=True)
    if frame.is_empty():
        raise QueryError(
            "no rows at a set needle depth: evaluate a task with a depth (niah, passkey) with "
            "eval.depths, e.g. [0.0, 0.25, 0.5, 0.75, 1.0]"
        )
    return with_labels(frame)


def depth_table(frame: pl.DataFrame, metric: str) -> tuple[list[float], list[int], np.ndarray]:
    """Depths (rows, ascending), lengths (columns, ascending) and the seed mean of ``metric``
    in each cell (NaN where not evaluated) of one panel's rows."""
    means = (
        finite_rows(frame, metric)
        .group_by("depth", "length")
        .agg(pl.col(metric).cast(pl.Float64).mean())
    )
    depths = sorted(set(frame.get_column("depth").to_list()))
    lengths = sorted(set(frame.get_column("length").to_list()))
    grid = np.full((len(depths), len(lengths)), np.nan)
    for d, n, v in means.iter_rows():
        grid[depths.index(d), lengths.index(n)] = v
    return depths, lengths, grid


@PLOTS.register("depth")
@styled
def depth(
    source: Source,
    *,
    metric: str = "accuracy",
    row: str = "auto",
    annotate: bool = True,
    wrap: int = 6,
    out: str | Path | None = None,
) -> Figure:
    """Needle accuracy by length x depth, a heatmap per curve.

    ``metric`` (accuracy, exact_match or loss) of the rows at a set needle depth
    (``eval.depths``), seed means, one cell per (evaluation length, depth): depth 0% (the
    start of the context) at the top, lengths left to right with the trained length's column
    edged by dashed lines; one panel per curve label (PE kind, RoPE scaling, fine-tuned), one
    row of panels per task (``row="auto"``: else per width or L_train when those vary). With a
    single row, more than ``wrap`` panels wrap onto further rows of ``wrap``.
    """
    frame = depth_frame(source)
    if metric not in frame.columns:
        raise QueryError(f"unknown metric {metric!r}; try one of {', '.join(RATES)}, loss")
    varying = [c for c in ROWS if c in frame.columns and frame.get_column(c).n_unique() > 1]
    facet = (varying[0] if varying else None) if row == "auto" else row
    row_levels = sorted(set(frame.get_column(facet).to_list())) if facet else [None]
    labels = sorted(set(frame.get_column("label").to_list()), key=label_key)
    warn_if_mixed(frame, [facet, "label", "length", "depth"])
    wrapped = len(row_levels) == 1 and len(labels) > wrap > 0
    n_rows = -(-len(labels) // wrap) if wrapped else len(row_levels)
    n_cols = wrap if wrapped else len(labels)
    fig, axes = panel_grid(n_rows, n_cols, sharex=False, sharey=False, extra=1.2)
    for ax in axes.flat[len(labels) :] if wrapped else ():
        ax.set_axis_off()
    rate = metric in RATES
    limits = (0.0, 1.0) if rate else (None, None)
    for i, level in enumerate(row_levels):
        part = frame if facet is None else frame.filter(pl.col(facet) == level)
        for j, label in enumerate(labels):
            ax = axes[divmod(j, wrap)] if wrapped else axes[i, j]
            cell = part.filter(pl.col("label") == label)
            title = ", ".join(t for t in (facet_title(facet, level) if facet else "", label) if t)
            ax.set_title(title, fontsize=9)
            if cell.is_empty():
                ax.set_axis_off()
                continue
            depths, lengths, grid = depth_table(cell, metric)
            sns.heatmap(
                grid,
                ax=ax,
                vmin=limits[0],
                vmax=limits[1],
                cmap="RdYlGn" if rate else "viridis_r",
                annot=annotate,
                fmt=".2f",
                annot_kws={"fontsize": 7},
                xticklabels=[str(n) for n in lengths],
                yticklabels=[f"{100 * d:g}%" for d in depths],
                cbar=j == len(labels) - 1 or (wrapped and j % wrap == wrap - 1),
                cbar_kws={"label": name_of(metric)},
                linewidths=0.5,
                linecolor="white",
            )
            train = cell.get_column("train.length").unique().to_list()
            if len(train) == 1 and train[0] in lengths:
                at = lengths.index(train[0])
                for x in (at, at + 1):
                    ax.axvline(x, color="black", linestyle="--", linewidth=1.4, zorder=3)
            bottom = j >= len(labels) - n_cols if wrapped else i == len(row_levels) - 1
            ax.set_xlabel("evaluation length" if bottom else "")
            ax.set_ylabel("needle depth" if j % n_cols == 0 else "")
    fig.suptitle(f"{name_of(metric)} by evaluation length and needle depth")
    return finish(fig, out)

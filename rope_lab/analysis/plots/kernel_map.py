"""``kernel-map``: the tail kernel at initialisation against the length ratio (log2), one line
per depth and one panel per encoding, from the Parquet rows `rope-lab kernel-map --output`
writes (`rope_lab.ntk.kernel_map`), with the vanishing threshold
(`rope_lab.analysis.kernel_map.VANISHING_COS`) as a horizontal line. Rows of both stages
(`kernel-map --from-run`, `rope_lab.ntk.trained_map`) give each line twice: dotted at
initialisation, solid after training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis.kernel_map import VANISHING_COS
from rope_lab.analysis.plots.axes import log2_axis
from rope_lab.analysis.plots.frames import command_rows
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.style import styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

NEEDED = ("encoding", "depth", "width", "parametrization", "kernel", "ratio")
MAP_METRICS = ("tail_cos_mean", "kernel_tail_collapse_target", "k_cross_cos_mean", "head_cos_mean")


def kernel_map_frame(source: Any) -> pl.DataFrame:
    """The kernel-map rows of ``source`` (a frame, or the path of the Parquet file, alone or in
    a one-item list); QueryError naming the file when it is not one."""
    return command_rows(source, "kernel-map", NEEDED)


STAGE_LINES = {"init": ":", "trained": "-"}


def _lines(ax: Axes, rows: pl.DataFrame, by: str, metric: str, colours: dict) -> None:
    """One line of the seed-mean ``metric`` against ratio per value of column ``by`` and, in
    rows of both stages, per stage (init dotted, trained solid, labelled "VALUE STAGE")."""
    staged = "stage" in rows.columns and rows["stage"].n_unique() > 1
    keys = [by, "stage"] if staged else [by]
    means = rows.group_by([*keys, "ratio"]).agg(pl.col(metric).mean()).sort([*keys, "ratio"])
    for value, line in means.group_by(keys, maintain_order=True):
        style = STAGE_LINES.get(str(value[1]), "-") if staged else "-"
        ax.plot(line["ratio"], line[metric], marker="o", ms=3, color=colours[value[0]],
                ls=style, label=" ".join(map(str, value)))  # fmt: skip


def _most_common(frame: pl.DataFrame, col: str) -> Any:
    return frame.group_by(col).len().sort(["len", col], descending=True)[col][0]


@PLOTS.register("kernel-map")
@styled
def kernel_map(
    source: Any,
    *,
    metric: str = "tail_cos_mean",
    threshold: float = VANISHING_COS,
    out: str | Path | None = None,
) -> Figure:
    """Kernel map: the tail kernel at init (and, in rows with a `stage`, after training: init
    dotted, trained solid) against the length ratio, per depth and encoding.

    Rows: the NTK, the NNGP (where measured) at the most common width and parametrisation,
    one line per depth; last row: the NTK at the most common depth, one line per (width,
    parametrisation). Columns: encodings. Dashed: ``threshold``. ``metric``: a column of
    `rope-lab kernel-map` (tail_cos_mean, kernel_tail_collapse_target (NTK only),
    k_cross_cos_mean, head_cos_mean).
    """
    if metric not in MAP_METRICS:
        raise QueryError(f"unknown metric {metric!r}; try one of {', '.join(MAP_METRICS)}")
    frame = kernel_map_frame(source).filter(pl.col(metric).is_not_null())
    if frame.is_empty():
        raise QueryError(f"no {metric} rows to draw")
    width, param = _most_common(frame, "width"), _most_common(frame, "parametrization")
    depth = _most_common(frame, "depth")
    frame = frame.with_columns(
        variant=pl.format("{} w{}", pl.col("parametrization"), pl.col("width"))
    )
    encodings = frame["encoding"].unique(maintain_order=True).to_list()
    kernels = [k for k in ("ntk", "nngp") if k in frame["kernel"].unique().to_list()]
    main = frame.filter((pl.col("width") == width) & (pl.col("parametrization") == param))
    variants = frame.filter((pl.col("kernel") == "ntk") & (pl.col("depth") == depth))
    fig, axes = panel_grid(len(kernels) + 1, len(encodings), sharey=False)
    cmap = matplotlib.colormaps["viridis"]
    depths = sorted(frame["depth"].unique().to_list())
    depth_colours = {d: cmap(0.9 * i / max(len(depths) - 1, 1)) for i, d in enumerate(depths)}
    names = sorted(variants["variant"].unique().to_list())
    tab = matplotlib.colormaps["tab10"]
    variant_colours = {v: tab(i % 10) for i, v in enumerate(names)}
    for j, encoding in enumerate(encodings):
        for i, kernel in enumerate(kernels):
            ax = axes[i][j]
            rows = main.filter((pl.col("encoding") == encoding) & (pl.col("kernel") == kernel))
            _lines(ax, rows, "depth", metric, depth_colours)
            ax.set_title(f"{encoding}: {kernel.upper()}, {param} w{width}")
        ax = axes[len(kernels)][j]
        _lines(ax, variants.filter(pl.col("encoding") == encoding), "variant", metric,
               variant_colours)  # fmt: skip
        ax.set_title(f"{encoding}: NTK, depth {depth}")
    lowest = min(float(frame[metric].min()), threshold)  # type: ignore[arg-type]
    for ax in axes.flat:
        ax.axhline(threshold, color="0.3", ls="--", lw=1)
        if metric.endswith("cos_mean"):  # the whole way down to the threshold, on one scale
            ax.set_ylim(min(lowest, 0.0) - 0.03, 1.03)
        log2_axis(ax, frame["ratio"].unique().to_list())
        ax.set_xlabel("probe length / L_train")
    for i in range(len(kernels) + 1):
        axes[i][0].set_ylabel(metric.replace("_", " "))
        axes[i][-1].legend(
            title="depth" if i < len(kernels) else "variant", fontsize=7,
            loc="center left", bbox_to_anchor=(1.0, 0.5),
        )  # fmt: skip
    stages = frame["stage"].unique().to_list() if "stage" in frame.columns else ["init"]
    when = {"init": "at initialisation", "trained": "after training"}
    title = " and ".join(when[s] for s in STAGE_LINES if s in stages)
    if len(stages) > 1:
        title += " (dotted: init, solid: trained)"
    fig.suptitle(f"tail kernel {title}: {metric.replace('_', ' ')} "
                 f"(dashed: vanishing threshold {threshold:g})")  # fmt: skip
    return finish(fig, out)

"""``lr-transfer``: loss against learning rate per width, one panel per parametrisation, with
each width's optimal lr (`rope_lab.analysis.lr_transfer`) marked."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.lr_transfer import LR, WIDTH, final_trained_rows, lr_transfer_tables
from rope_lab.analysis.plots.frames import Source, eval_frame
from rope_lab.analysis.plots.labels import name_of
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.style import styled
from rope_lab.registry import PLOTS

PARAM = "model.parametrization"


@PLOTS.register("lr-transfer")
@styled
def lr_transfer(
    source: Source,
    *,
    length_ratio: float = 1.0,
    metric: str | None = None,
    n_boot: int = 200,
    out: str | Path | None = None,
) -> Figure:
    """Loss vs learning rate per width, one panel per parametrisation, optima marked.

    At ``length_ratio`` x L_train, one row of panels per task: the seed-mean loss of each
    (width, lr) on a log lr axis, one colour per width; a star at each width's optimal lr (the
    vertex of the parabola in log lr through the best lr and its neighbours) with its 95%
    seed-bootstrap interval, and the slope of log lr* against log width in the title. The loss
    is ``metric``: without it bits per byte when every row has one, else nats per token.
    """
    frame = eval_frame(source)
    y = q.loss_metric(frame) if metric is None else metric
    q.check_columns(frame, [LR, WIDTH, PARAM, "length_ratio", y], "the plot")
    have = sorted(frame.get_column("length_ratio").unique().drop_nulls().to_list())
    frame = final_trained_rows(frame.filter(pl.col("length_ratio") == length_ratio))
    if frame.is_empty():
        raise q.QueryError(f"no eval rows at length ratio {length_ratio:g}; ratios are {have}")
    optima, slopes = lr_transfer_tables(frame, y=y, n_boot=n_boot)
    points = (
        frame.filter(pl.col(y).is_not_null() & pl.col(y).is_finite())
        .group_by("task.name", PARAM, WIDTH, LR)
        .agg(pl.col(y).mean())
        .sort(LR)
    )
    tasks = sorted(optima.get_column("task.name").unique().to_list())
    params = sorted(optima.get_column(PARAM).unique().to_list())
    widths = sorted(optima.get_column("width").unique().to_list())
    cmap = matplotlib.colormaps["viridis"]
    colors = {w: cmap(0.85 * i / max(len(widths) - 1, 1)) for i, w in enumerate(widths)}
    fig, axes = panel_grid(len(tasks), len(params), sharex=True, sharey=True)
    for row_axes, task in zip(axes, tasks, strict=True):
        for ax, param in zip(row_axes, params, strict=True):
            at = [pl.col("task.name") == task, pl.col(PARAM) == param]
            for w in widths:
                line = points.filter(*at, pl.col(WIDTH) == w)
                ax.plot(line[LR], line[y], marker="o", ms=4, color=colors[w], label=f"{w:g}")
            for opt in optima.filter(*at).to_dicts():
                if opt["error"] is not None:
                    continue
                lo, hi = opt["lr_star_ci_low"], opt["lr_star_ci_high"]
                err = None
                if math.isfinite(lo) and math.isfinite(hi):
                    err = [[opt["lr_star"] - lo], [hi - opt["lr_star"]]]
                ax.errorbar([opt["lr_star"]], [opt["loss_at_star"]], xerr=err, marker="*",
                            ms=12, color=colors[opt["width"]], markeredgecolor="black",
                            zorder=4)  # fmt: skip
            slope = slopes.filter(*at).row(0, named=True)
            band = ""
            if math.isfinite(slope["slope_ci_low"]):
                band = f" [{slope['slope_ci_low']:.2f}, {slope['slope_ci_high']:.2f}]"
            ax.set_title(f"{task} · {param}: slope {slope['slope']:.2f}{band}", fontsize=9)
            ax.set_xscale("log")
            ax.set_xlabel("learning rate")
        row_axes[0].set_ylabel(name_of(y))
    axes[0][-1].legend(title="width", fontsize=7, title_fontsize=7)
    fig.suptitle(f"{name_of(y)} at {length_ratio:g}x L_train vs learning rate; ★ optimal lr "
                 "(95% CI over seeds)", fontsize=11)  # fmt: skip
    return finish(fig, out)

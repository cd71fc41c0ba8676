"""``coord-check``: activation RMS against width, log-log, one line per layer and one panel per
parametrisation, from the Parquet rows `rope-lab coord-check --output` writes
(`rope_lab.trial.coord_check`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis.plots.frames import command_rows
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.style import styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

QUANTITIES = ("rms_change", "rms_init")
NEEDED = ("parametrization", "width", "layer", "rms_init", "rms_change")


def coord_frame(source: Any) -> pl.DataFrame:
    """The coordinate-check rows of ``source`` (a frame, or the path of the Parquet file, alone
    or in a one-item list); QueryError naming the file when it is not one."""
    return command_rows(source, "coord-check", NEEDED)


@PLOTS.register("coord-check")
@styled
def coord_check(
    source: Any, *, metric: str = "rms_change", out: str | Path | None = None
) -> Figure:
    """Coordinate check: activation RMS against width per layer and parametrisation.

    ``metric``: ``rms_change`` (the RMS of each layer's change after the check's steps) or
    ``rms_init``; log-log axes, one panel per parametrisation (sharing the y axis), one line
    per layer; a flat line is a width-independent layer. Zero values (a zero-initialised
    readout's logits at init) are left out.
    """
    if metric not in QUANTITIES:
        raise QueryError(f"unknown metric {metric!r}; try one of {', '.join(QUANTITIES)}")
    frame = coord_frame(source).filter(pl.col(metric) > 0)
    params = frame.get_column("parametrization").unique(maintain_order=True).to_list()
    layers = frame.get_column("layer").unique(maintain_order=True).to_list()
    if not params:
        raise QueryError(f"no positive {metric} to draw")
    fig, axes = panel_grid(1, len(params))
    cmap = matplotlib.colormaps["viridis"]
    for ax, param in zip(axes[0], params, strict=True):
        rows = frame.filter(pl.col("parametrization") == param)
        for i, layer in enumerate(layers):
            line = rows.filter(pl.col("layer") == layer).sort("width")
            if line.is_empty():
                continue
            color = cmap(0.9 * i / max(len(layers) - 1, 1))
            ax.plot(line["width"], line[metric], marker="o", color=color, label=layer)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(param)
        ax.set_xlabel("width")
    axes[0][0].set_ylabel(metric.replace("_", " "))
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(f"coordinate check: {metric.replace('_', ' ')} by width")
    return finish(fig, out)

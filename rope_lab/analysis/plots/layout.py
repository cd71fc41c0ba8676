"""Figure layout and files: grids of panels, facets by column values, outer axis labels, and
writing a figure in one or several formats."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis.plots.labels import facet_title
from rope_lab.analysis.query import QueryError

FORMATS: Final = ("png", "pdf", "svg")


PANEL: Final = (4.4, 3.3)


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


def finish(fig: Figure, out: str | Path | None) -> Figure:
    """Write ``fig`` to ``out`` when given; return it."""
    if out is not None:
        save(fig, out)
    return fig


def panel_grid(
    nrows: int, ncols: int, *, sharex: bool = True, sharey: bool = True, panel=PANEL, extra=2.2
) -> tuple[Figure, np.ndarray]:
    """A constrained-layout figure of ``nrows`` x ``ncols`` panels of size ``panel``."""
    fig = Figure(figsize=(panel[0] * ncols + extra, panel[1] * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)
    return fig, axes


def facets(
    frame: pl.DataFrame,
    col: str | None,
    row: str | None,
    *,
    col_levels: Sequence[Any] | None = None,
    **kw: Any,
) -> tuple[Figure, list[tuple[Axes, pl.DataFrame, str]]]:
    """A panel per (``row``, ``col``) value pair: (axes, its rows of ``frame``, its title).

    ``col_levels`` fixes the columns' values and order; ``kw`` goes to :func:`panel_grid`.
    """
    cols = list(col_levels) if col_levels is not None else _levels(frame, col)
    rows = _levels(frame, row)
    fig, axes = panel_grid(len(rows), len(cols), **kw)
    items = []
    for i, rv in enumerate(rows):
        for j, cv in enumerate(cols):
            sub = frame
            parts = []
            for name, value in ((row, rv), (col, cv)):
                if name is not None:
                    sub = _where(sub, name, value)
                    parts.append(facet_title(name, value))
            items.append((axes[i, j], sub, ", ".join(parts)))
    for ax in axes[-1, :]:
        ax.tick_params(labelbottom=True)
    return fig, items


def _where(frame: pl.DataFrame, col: str, value: Any) -> pl.DataFrame:
    """The rows whose ``col`` equals ``value`` (is null for None)."""
    return frame.filter(pl.col(col) == value if value is not None else pl.col(col).is_null())


def _levels(frame: pl.DataFrame, col: str | None) -> list[Any]:
    """Facet values of ``col`` in order (nulls last), or ``[None]`` for no facet."""
    if col is None:
        return [None]
    values = frame.get_column(col).unique().to_list()
    return sorted(values, key=lambda v: (v is None, v if not isinstance(v, str) else 0, str(v)))


def outer_labels(fig_axes: Sequence[Axes], xlabel: str, ylabel: str) -> None:
    """x labels on the bottom row of panels only, y labels on the first column only."""
    for ax in fig_axes:
        spec = ax.get_subplotspec()
        if spec is None:
            continue
        ax.set_xlabel(xlabel if spec.is_last_row() else "")
        ax.set_ylabel(ylabel if spec.is_first_col() else "")

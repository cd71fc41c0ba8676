"""Figures of a sweep: extrapolation curves, per-position loss, NTK drift and cross-kernels,
kernel heatmaps, scaling laws and a one-page dashboard.

Every function takes a run directory (or several, or loaded Results, or an already-queried
polars frame), returns a matplotlib ``Figure`` (built without pyplot, so no global state),
and writes it when ``out`` is given (format from the extension: ``.png``, ``.pdf``, ``.svg``;
:func:`save` writes several formats at once). Length axes are log2 with a dashed line at
L_train; the shaded band around a line is ± one standard error over seeds (drawn where a
configuration has several seeds). Colours: one hue per PE kind / RoPE scaling method, light
and dark shades of it for the scaling factors.

Modules: ``eval_curves`` (extrapolation, positions), ``ntk`` (ntk-drift, ntk-cross),
``kernels`` (kernel heatmaps), ``scaling_laws`` (scaling), ``dashboard`` (summary), and the
shared ``labels``, ``style``, ``layout``, ``frames`` and ``axes``; this package holds the
dispatch from plot kind to function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from matplotlib.figure import Figure

from rope_lab.plots.dashboard import summary
from rope_lab.plots.eval_curves import LENGTH_AXES, extrapolation, positions
from rope_lab.plots.frames import Source
from rope_lab.plots.kernels import kernel, load_kernel_arrays, plot_kernel_matrices
from rope_lab.plots.labels import NAMES, SHORT, name_of
from rope_lab.plots.layout import FORMATS, PANEL, save
from rope_lab.plots.ntk import CROSS_METRICS, DRIFT_METRICS, ntk_cross, ntk_drift
from rope_lab.plots.scaling_laws import EVAL_METRICS, scaling, scaling_data
from rope_lab.plots.style import label_key
from rope_lab.query import PLOT_KINDS, QueryError

__all__ = [
    "CROSS_METRICS",
    "DRIFT_METRICS",
    "EVAL_METRICS",
    "FORMATS",
    "KINDS",
    "LENGTH_AXES",
    "NAMES",
    "PANEL",
    "SHORT",
    "Source",
    "extrapolation",
    "kernel",
    "label_key",
    "load_kernel_arrays",
    "name_of",
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

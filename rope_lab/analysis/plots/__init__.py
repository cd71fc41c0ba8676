"""Figures of a sweep: extrapolation curves, per-position loss, NTK drift and cross-kernels,
kernel heatmaps, scaling laws and a one-page dashboard.

Every function takes a run directory (or several, or loaded Results, or an already-queried
polars frame), returns a matplotlib ``Figure`` (built without pyplot, so no global state),
and writes it when ``out`` is given (format from the extension: ``.png``, ``.pdf``, ``.svg``;
:func:`save` writes several formats at once). Length axes are log2 with a dashed line at
L_train; the shaded band around a line is ± one standard error over seeds (drawn where a
configuration has several seeds). Colours: one hue per PE kind / RoPE scaling method, light
and dark shades of it for the scaling factors.

A plot kind is a function registered with ``@PLOTS.register("kind")`` (``registry.PLOTS``)
in a module of this package; the first line of its docstring is its one-line help. Modules:
``eval_curves`` (extrapolation, positions), ``ntk`` (ntk-drift, ntk-cross), ``kernels``
(kernel), ``scaling_laws`` (scaling), ``loss_law`` (loss-law), ``isoflop`` (isoflop),
``decode`` (decode), ``depth`` (depth), ``kernel_map`` (kernel-map), ``dashboard``
(summary), and the shared ``curves``, ``labels``, ``style``, ``layout``, ``frames`` and
``axes``; ``options`` reads a kind's keyword options from its signature (``rope-lab plot --set
KEY=VALUE``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from matplotlib.figure import Figure

# isort: off
# Import order is registration order, which is the order PLOTS and KINDS list the kinds in.
from rope_lab.analysis.plots.eval_curves import LENGTH_AXES, extrapolation, positions
from rope_lab.analysis.plots.ntk import CROSS_METRICS, drift_metrics, ntk_cross, ntk_drift
from rope_lab.analysis.plots.kernels import kernel, load_kernel_arrays, plot_kernel_matrices
from rope_lab.analysis.plots.scaling_laws import EVAL_METRICS, scaling, scaling_data
from rope_lab.analysis.plots.dashboard import summary
# isort: on

from rope_lab.analysis.plots.frames import Source
from rope_lab.analysis.plots.labels import NAMES, SHORT, name_of
from rope_lab.analysis.plots.layout import FORMATS, PANEL, save
from rope_lab.analysis.plots.options import describe, keyword_options, parse_settings
from rope_lab.analysis.plots.style import label_key
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS, UnknownName

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "CROSS_METRICS",
    "EVAL_METRICS",
    "FORMATS",
    "KINDS",
    "LENGTH_AXES",
    "NAMES",
    "PANEL",
    "PLOTS",
    "SHORT",
    "Source",
    "drift_metrics",
    "extrapolation",
    "kernel",
    "kind_help",
    "label_key",
    "load_kernel_arrays",
    "name_of",
    "ntk_cross",
    "ntk_drift",
    "option_help",
    "plot",
    "plot_function",
    "plot_kernel_matrices",
    "plot_options",
    "plot_settings",
    "positions",
    "save",
    "scaling",
    "scaling_data",
    "summary",
]

KINDS: Final = PLOTS.names()


def plot_function(kind: str) -> Callable[..., Figure]:
    """The function registered as plot ``kind``; QueryError listing the kinds when unknown."""
    try:
        func: Callable[..., Figure] = PLOTS[kind]
    except UnknownName:
        kinds = ", ".join(PLOTS.names())
        raise QueryError(f"unknown plot kind {kind!r}; kinds are: {kinds}") from None
    return func


def kind_help(kind: str) -> str:
    """One-line help of plot ``kind``: the first line of its docstring, without the period."""
    doc = inspect.getdoc(plot_function(kind)) or ""
    return doc.partition("\n")[0].rstrip(".")


def plot_options(kind: str) -> list[str]:
    """Keyword options of plot ``kind`` (``metric`` stands for ``metrics`` of the NTK plots)."""
    params = inspect.signature(plot_function(kind)).parameters
    names = [p for p in params if p not in ("source", "out")]
    return ["metric" if n == "metrics" else n for n in names]


def option_help(kind: str) -> str:
    """Each keyword option of plot ``kind`` with its type and default, on one line."""
    return describe(plot_function(kind))


def plot_settings(kind: str, settings: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` texts (``rope-lab plot --set``) as keyword options of plot ``kind``, each
    value parsed as YAML and checked against the option's type (QueryError naming the key and
    the options allowed, or the type expected)."""
    return parse_settings(kind, plot_function(kind), settings)


def plot(kind: str, source: Any, *, out: str | Path | None = None, **options: Any) -> Figure:
    """Draw plot ``kind`` (one of KINDS) of ``source`` and write it to ``out`` if given.

    ``options`` are that function's keyword arguments (``metric="m"`` becomes
    ``metrics=("m",)`` for the NTK plots). Unknown kinds and options raise QueryError.
    """
    accepted = plot_options(kind)
    func = plot_function(kind)
    unknown = [k for k in options if k not in accepted and k not in keyword_options(func)]
    if unknown:
        raise QueryError(
            f"plot kind {kind!r} does not take {', '.join(unknown)}; it takes: "
            f"{', '.join(accepted) or '(no options)'}"
        )
    if "metric" in options and "metrics" in inspect.signature(func).parameters:
        if "metrics" in options:
            raise QueryError(f"plot kind {kind!r}: give metric or metrics, not both")
        options["metrics"] = (options.pop("metric"),)
    if isinstance(source, list | tuple) and len(source) == 1:
        source = source[0]
    return func(source, out=out, **options)

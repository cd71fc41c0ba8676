"""``attention_mass``: where attention puts its mass as the evaluation length grows, one panel
per layer, one line per curve (PE kind / RoPE scaling / attention variant), from the rows of
``eval.attention_stats`` (``mode`` attention, each layer's row over all its heads)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.eval_curves import extrapolation
from rope_lab.analysis.plots.frames import Source
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS

METRICS = ("first_token_mass", "sink_mass", "gate_mean", "fox_window")
ROWS = ("task.name", "model.width", "train.length", "model.depth")  # rows: the first that varies


def attention_frame(source: Source) -> pl.DataFrame:
    """The per-layer attention rows over all heads (``head`` null) of ``source``; QueryError
    when the runs have none."""
    frame = source if isinstance(source, pl.DataFrame) else q.eval_table(source, mode="attention")
    if "head" in frame.columns:
        frame = frame.filter(pl.col("mode") == "attention", pl.col("head").is_null())
    if frame.is_empty() or "layer" not in frame.columns:
        raise QueryError("no attention rows: run a sweep with eval.attention_stats: true")
    return frame


@PLOTS.register("attention_mass")
def attention_mass(
    source: Source,
    *,
    metric: str = "first_token_mass",
    x: str = "length_ratio",
    hue: str = "label",
    out: str | Path | None = None,
) -> Figure:
    """Attention statistics vs length, one panel per layer.

    ``metric``: ``first_token_mass`` (the weight on the first token, mean over queries i >= 1
    and heads), ``sink_mass`` (on the learned sink logit), ``gate_mean`` (the output gate) or
    ``fox_window`` (the forget gate's effective window, median over heads), vs ``x``
    (``length_ratio``: L_train at 1), one line per ``hue``; variants without the statistic
    draw no line. One row of panels per task (else per width, L_train or depth when those
    vary), so no line pools models of two sizes.
    """
    if metric not in METRICS:
        raise QueryError(
            f"attention_mass: unknown metric {metric!r}; allowed: {', '.join(METRICS)}"
        )
    frame = attention_frame(source)
    varying = q.varying_columns(frame, [c for c in ROWS if c in frame.columns])
    row = varying[0] if varying else None
    return extrapolation(frame, metric=metric, x=x, hue=hue, col="layer", row=row, out=out)

"""``decode``: answers generated with a key/value cache against length, one panel per cache
protocol, next to the teacher-forced numbers of the same models and scalings."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.eval_curves import extrapolation
from rope_lab.analysis.plots.frames import Source
from rope_lab.analysis.query import QueryError
from rope_lab.config import ANY_PROTOCOL
from rope_lab.registry import PLOTS

TEACHER_FORCED = "teacher forced"
JOIN = ["trial_id", "method", "factor"]
ROWS = ("task.name", "model.width", "train.length")  # facet rows, the first that varies


def decode_frame(source: Source) -> pl.DataFrame:
    """Decode rows, and the teacher-forced rows of the same (trial, method, factor) with
    ``protocol`` "teacher forced"; rows decoded once for every protocol (`ANY_PROTOCOL`: the
    scaling does not depend on the length) are shown under each protocol of the runs.
    QueryError when the runs have no decode rows."""
    frame = source if isinstance(source, pl.DataFrame) else q.eval_table(source, mode="all")
    decoded = frame.filter(pl.col("mode") == "decode")
    if decoded.is_empty():
        raise QueryError("no decode rows: run a sweep with eval.decode.protocols (e.g. "
                         "sweeps/decode_passkey.yaml)")  # fmt: skip
    keys = decoded.select(JOIN).unique()
    protocols = sorted(set(decoded.get_column("protocol").drop_nulls()) - {ANY_PROTOCOL})
    shared = decoded.filter(pl.col("protocol") == ANY_PROTOCOL)
    decoded = pl.concat(
        [decoded.filter(pl.col("protocol") != ANY_PROTOCOL)]
        + [shared.with_columns(pl.lit(p).alias("protocol")) for p in protocols or [ANY_PROTOCOL]],
        how="diagonal_relaxed",
    )
    forced = frame.filter(pl.col("mode").is_null() & (pl.col("finetune_steps") == 0))
    forced = forced.join(keys, on=JOIN, how="semi").with_columns(
        pl.lit(TEACHER_FORCED).alias("protocol")
    )
    return pl.concat([forced, decoded], how="diagonal_relaxed")


@PLOTS.register("decode")
def decode(
    source: Source,
    *,
    metric: str = "exact_match",
    x: str = "length",
    hue: str = "label",
    out: str | Path | None = None,
) -> Figure:
    """Decoded answers vs length, per cache protocol.

    ``metric`` (exact_match or accuracy of the answer tokens) vs evaluation length, one line
    per PE kind / RoPE scaling, one panel per cache protocol
    (`rope_lab.model.kv_cache.PROTOCOLS`) and one for the teacher-forced numbers of the same
    models; one row of panels per task (else per width or L_train when those vary). A whole
    answer is right under
    greedy decoding exactly when it is under teacher forcing, so exact match agrees across
    panels for a scaling that does not depend on the length; dynamic scaling shows where the
    protocols part.
    """
    frame = decode_frame(source)
    # rows: the first of these that varies (tasks are never pooled in one curve)
    varying = [c for c in ROWS if c in frame.columns and frame.get_column(c).n_unique() > 1]
    row = varying[0] if varying else None
    return extrapolation(frame, metric=metric, x=x, hue=hue, col="protocol", row=row, out=out)

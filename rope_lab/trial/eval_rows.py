"""The rows of the `eval` table from an evaluation's metric sums (`rope_lab.trial.evaluate`):
a whole-sequence row and one per position bucket, with loss (nats per scored token),
perplexity, accuracy and, for text tasks, bits per byte."""

from __future__ import annotations

import itertools
import math

import numpy as np


def rows_for_length(
    sums: dict, length: int, buckets: int, base: dict
) -> list[dict[str, float | int | str | None]]:
    """Whole-sequence row plus one row per position bucket (bucket start in `position_bucket`)."""
    nbytes = sums.get("byte_sum")

    def bytes_in(start: int, stop: int) -> float | None:
        return None if nbytes is None else float(nbytes[start:stop].sum())

    whole = _metric_row(
        sums["loss_sum"].sum(), sums["correct"].sum(), sums["count"].sum(), bytes_in(0, length)
    )
    base = {**base, "sequences_per_forward": sums.get("sequences_per_forward")}
    rows = [
        {
            **base,
            "length": length,
            **whole,
            "exact_match": sums["exact_match"],
            "position_bucket": None,
        }
    ]
    n = min(buckets, length)
    edges = np.linspace(0, length, n + 1).astype(int)
    for start, stop in itertools.pairwise(edges):
        part = _metric_row(
            sums["loss_sum"][start:stop].sum(),
            sums["correct"][start:stop].sum(),
            sums["count"][start:stop].sum(),
            bytes_in(start, stop),
        )
        rows.append(
            {**base, "length": length, **part, "exact_match": None, "position_bucket": int(start)}
        )
    return rows


def _metric_row(
    loss_sum: float, correct: float, count: float, nbytes: float | None = None
) -> dict[str, float | None]:
    """Loss (nats per scored token), perplexity, accuracy and bits per byte: the loss in bits
    over the scored tokens' bytes, loss_sum / nbytes / ln 2 (None without byte counts)."""
    loss = loss_sum / count if count else math.nan
    if nbytes is None:
        bpb = None
    else:
        bpb = loss_sum / nbytes / math.log(2) if count and nbytes else math.nan
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)) if count else math.nan,
        "accuracy": correct / count if count else math.nan,
        "bits_per_byte": bpb,
    }

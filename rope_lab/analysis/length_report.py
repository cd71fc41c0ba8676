"""The source notes' report of one curve (a trial under one scaling method, factor and
fine-tune), beside `longest_length` in `extrapolation_summary`: effective length, loss per
length bucket, short-context regression and smoothness. Plain Python over a curve's evaluated
lengths and values (no JAX, no polars).

- **Effective length** (RULER, Hsieh et al. 2024): the longest evaluated length L such that
  every evaluated length up to L meets a bar. For a higher-is-better score (accuracy) the bar is
  absolute, score >= `threshold` (0.9, the lab's accuracy threshold), checked from the shortest
  evaluated length; RULER's bar is likewise one number for every model. For a loss (loss, bits
  per byte, perplexity) it is the loss within 1 / `threshold` (1.11 at 0.9) of the *unscaled*
  model's value at L_train (the trial as trained: one bar for all its methods), checked from
  L_train up: a shorter sequence's mean loss is higher for having less context, not for
  extrapolating badly. Null when the first length checked misses the bar.
- **Loss per length bucket**: the mean over evaluated lengths of each bucket of ratios
  length / L_train: (0, 1], (1, 2], (2, 8], (8, inf) (`BUCKETS`); null for an empty bucket.
- **Short-context regression**: over the evaluated lengths in [0.25, 1] x L_train that both
  have, the mean of score(curve) - score(unscaled model) at the same length (accuracy: negative
  is a regression; loss: positive is).
- **Smoothness**: the largest |score(l_{i+1}) - score(l_i)| over adjacent evaluated lengths
  (both values present), and the longer length of that pair.

NaN or missing values are left out of the means and pairs; in the effective length they end it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Final

THRESHOLD: Final = 0.9
# (name, low ratio exclusive, high ratio inclusive) of length / L_train
BUCKETS: Final = (
    ("0_1x", 0.0, 1.0),
    ("1_2x", 1.0, 2.0),
    ("2_8x", 2.0, 8.0),
    ("8x_up", 8.0, math.inf),
)
SHORT_RATIOS: Final = (0.25, 1.0)  # the short-context range, inclusive, in L_train

Value = float | None


def _sorted(lengths: Sequence[int], values: Sequence[Value]) -> list[tuple[int, Value]]:
    return sorted(zip(lengths, values, strict=True), key=lambda t: t[0])


def effective_length(
    lengths: Sequence[int],
    values: Sequence[Value],
    *,
    bar: float | None,
    lower: bool,
    start: int = 0,
) -> int | None:
    """The longest of ``lengths`` >= ``start`` such that it and every evaluated length from
    ``start`` up to it has a value meeting ``bar`` (``<= bar`` when ``lower``, else ``>=``);
    None without a bar or when the first length checked misses it."""
    if bar is None or math.isnan(bar):
        return None
    best: int | None = None
    for length, v in _sorted(lengths, values):
        if length < start:
            continue
        if v is None or math.isnan(v) or not (v <= bar if lower else v >= bar):
            break
        best = length
    return best


def effective_bar(
    metric_lower: bool, unscaled_at_train: Value, threshold: float = THRESHOLD
) -> float | None:
    """The bar of :func:`effective_length`: ``threshold`` for a higher-is-better score, the
    unscaled model's L_train value / ``threshold`` for a loss (None without that value)."""
    if not metric_lower:
        return threshold
    if unscaled_at_train is None or math.isnan(unscaled_at_train):
        return None
    return unscaled_at_train / threshold


def bucket_means(
    lengths: Sequence[int], values: Sequence[Value], train_length: int
) -> dict[str, float | None]:
    """Bucket name -> mean of the present values whose length / ``train_length`` lies in it."""
    out: dict[str, float | None] = {}
    for name, low, high in BUCKETS:
        inside = [
            v
            for length, v in zip(lengths, values, strict=True)
            if low < length / train_length <= high and v is not None and not math.isnan(v)
        ]
        out[name] = sum(inside) / len(inside) if inside else None
    return out


def short_context_delta(
    lengths: Sequence[int],
    values: Sequence[Value],
    unscaled: dict[int, Value],
    train_length: int,
) -> float | None:
    """Mean over the lengths in [0.25, 1] x ``train_length`` with a present value on both
    sides of value - ``unscaled[length]``; None without any such length."""
    low, high = SHORT_RATIOS
    diffs = []
    for length, v in zip(lengths, values, strict=True):
        ref = unscaled.get(length)
        if not low <= length / train_length <= high or v is None or ref is None:
            continue
        if not (math.isnan(v) or math.isnan(ref)):
            diffs.append(v - ref)
    return sum(diffs) / len(diffs) if diffs else None


def largest_jump(
    lengths: Sequence[int], values: Sequence[Value]
) -> tuple[float | None, int | None]:
    """(largest |value change| between adjacent evaluated lengths with both values present,
    the longer length of that pair); (None, None) with fewer than two such neighbours."""
    best: tuple[float | None, int | None] = (None, None)
    pairs = _sorted(lengths, values)
    for (_, a), (length, b) in itertools.pairwise(pairs):
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            continue
        jump = abs(b - a)
        if best[0] is None or jump > best[0]:
            best = (jump, length)
    return best

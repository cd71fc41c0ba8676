"""T5 relative bias (Raffel et al. 2020, section 2.1): a learned logit bias per head and bucket.

Each head learns one scalar per bucket of the causal (unidirectional) relative distance
n = max(p_i - p_j, 0), bucketed as in T5 / Mesh-TensorFlow's `_relative_position_bucket`:
exact buckets for n < max_exact = num_buckets // 2, then buckets spaced logarithmically up to
`max_distance`,

    bucket(n) = min(max_exact + floor(log(n / max_exact) / log(max_distance / max_exact)
                                      * (num_buckets - max_exact)), num_buckets - 1),

so every distance from max_distance on shares the last bucket (which is what lets T5 run on
any length). Keys after the query (masked later) fall in bucket 0.

The floor is taken exactly: the first distance of each logarithmic bucket is found once, at
build time, in integer arithmetic, and `bias` counts the boundaries a distance has reached.
(Logs in floating point can land one bucket low where the quotient is an integer exactly:
num_buckets 17, max_distance 27, n = 12 gives log 1.5 / log 3.375 * 9 = 3, bucket 11, which
float32 computes as 10; num_buckets 9, max_distance 128, n = 8 gives 1, which float64 misses.
The default 32 / 128 has no such distance, so there it agrees with the reference code.)

The table starts at zeros, so an untrained T5-bias model is the NoPE model. That is this lab's
choice, not the reference's: Hugging Face's T5 draws it from N(0, d_model^-1/2), and Mesh
TensorFlow leaves it to the variable scope's default initializer. As with rope_lab's other
encodings, one table serves every layer (T5 itself shares it across the layers of a stack).

This module is the config and the exact bucket boundaries (plain Python); the bucketing in JAX
and the bias module `T5Bias` are `modules/t5.py`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.t5 import T5Bias


def bucket_boundaries(num_buckets: int, max_distance: int) -> tuple[int, ...]:
    """First distance of each logarithmic bucket max_exact + 1, ..., num_buckets - 1.

    With m = max_exact and s = num_buckets - m, bucket m + k (k >= 1) starts at the least n with
    log(n / m) / log(max_distance / m) * s >= k, i.e. n^s * m^k >= max_distance^k * m^s,
    decided with Python integers. Non-decreasing; equal entries where buckets are skipped.
    """
    if not num_buckets >= 2 or not max_distance > num_buckets // 2:
        raise ValueError(
            f"need num_buckets >= 2 and max_distance > num_buckets // 2, "
            f"got {num_buckets=}, {max_distance=}"
        )
    m, span = num_buckets // 2, num_buckets - num_buckets // 2

    def reaches(n: int, k: int) -> bool:
        return n**span * m**k >= max_distance**k * m**span

    starts = []
    for k in range(1, span):
        n = max(m, math.ceil(m * (max_distance / m) ** (k / span)))  # a float guess, then exact
        while n > m and reaches(n - 1, k):
            n -= 1
        while not reaches(n, k):
            n += 1
        starts.append(n)
    return tuple(starts)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@POSITIONS.register("t5_bias")
@dataclass(frozen=True)
class T5BiasConfig(EncodingConfig):
    """Bucket count and the distance where the last bucket starts
    (`model.position.t5_bias.num_buckets`, `.max_distance`)."""

    num_buckets: int = identity(32)
    max_distance: int = identity(128)

    label = "T5 bias"
    order = 6
    color = "#9467bd"
    hooks = frozenset({"bias"})
    family = "relative"
    learned = True

    def build(self, model, *, max_length, train_length, key) -> T5Bias:
        """A zero table of `model.n_heads` heads by `num_buckets` buckets."""
        from rope_lab.model.positions.modules.t5 import T5Bias  # deferred: imports JAX

        return T5Bias(model.n_heads, self.num_buckets, self.max_distance)

    def n_params(self, model, *, max_length) -> int:
        """One scalar per head and bucket."""
        return model.n_heads * self.num_buckets

    def check(self, trial, path) -> None:
        """Integers, num_buckets >= 2, and max_distance past the exact buckets."""
        super().check(trial, path)
        buckets, distance = self.num_buckets, self.max_distance
        if not _is_int(buckets) or not buckets >= 2:
            raise ConfigError(f"{path}.num_buckets: must be an integer >= 2, got {buckets!r}")
        if not _is_int(distance) or not distance > buckets // 2:
            raise ConfigError(
                f"{path}.max_distance: must be an integer > num_buckets // 2 = {buckets // 2}, "
                f"got {distance!r}"
            )

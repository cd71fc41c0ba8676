"""The T5 relative bias's module (Raffel et al. 2020): causal distances bucketed in JAX
(`relative_bucket`, with the exact boundaries of `positions/t5.py`) and a learned (H, buckets)
table of logit biases (`T5Bias`; config: `positions/t5.py`)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model.positions.modules.base import PositionEncoding
from rope_lab.model.positions.t5 import bucket_boundaries


def relative_bucket(
    distance: Int[Array, "*S"], max_exact: int, boundaries: tuple[int, ...]
) -> Int[Array, "*S"]:
    """Bucket (*S,) int32 of causal distances (*S,) >= 0: the distance itself below `max_exact`,
    else max_exact + the number of `bucket_boundaries` it has reached."""
    distance = distance.astype(jnp.int32)
    reached = (
        jnp.searchsorted(jnp.asarray(boundaries, jnp.int32), distance, side="right")
        if boundaries
        else jnp.zeros_like(distance)
    )
    return jnp.where(distance < max_exact, distance, max_exact + reached.astype(jnp.int32))


class T5Bias(PositionEncoding):
    """Learned table (H, num_buckets) of logit biases, indexed by head and distance bucket."""

    table: Float[Array, "H B"]
    max_exact: int = eqx.field(static=True)
    boundaries: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, heads: int, num_buckets: int, max_distance: int):
        self.table = jnp.zeros((heads, num_buckets), jnp.float32)
        self.max_exact = num_buckets // 2
        self.boundaries = bucket_boundaries(num_buckets, max_distance)

    def buckets(self, q_positions: Array, k_positions: Array) -> Int[Array, "Lq Lk"]:
        """(Lq, Lk) bucket of max(q - k, 0) for queries (Lq,) and keys (Lk,)."""
        q, k = q_positions.astype(jnp.int32), k_positions.astype(jnp.int32)
        distance = jnp.maximum(q[:, None] - k[None], 0)
        return relative_bucket(distance, self.max_exact, self.boundaries)

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk): table[h, bucket(max(p_i - p_j, 0))] for queries (Lq,) and keys (Lk,)."""
        return self.table[:, self.buckets(q_positions, k_positions)]

"""CoPE's module (Golovneva et al. 2024): contextual positions counted by sigmoid gates of the
logits, and the interpolated q . e term they index (config: `positions/cope.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from rope_lab.model.positions.modules.base import PositionEncoding


def contextual_positions(
    logits: Float[Array, "H Lq Lk"], visible: Bool[Array, "Lq Lk"], npos_max: int
) -> Float[Array, "H Lq Lk"]:
    """(H, Lq, Lk): p_ij = min(sum_{t >= j, visible} sigmoid(logits_it), npos_max - 1)."""
    gates = jnp.where(visible[None], jax.nn.sigmoid(logits), 0.0)
    return jnp.minimum(jax.lax.cumsum(gates, axis=2, reverse=True), float(npos_max - 1))


def interpolate(z: Float[Array, "H Lq P"], p: Float[Array, "H Lq Lk"]) -> Float[Array, "H Lq Lk"]:
    """(H, Lq, Lk): (1 - w) z[..., floor p] + w z[..., ceil p], w = p - floor p, for 0 <= p < P."""
    low = jnp.floor(p)
    w = p - low
    z_low = jnp.take_along_axis(z, low.astype(jnp.int32), axis=2)
    z_high = jnp.take_along_axis(z, jnp.ceil(p).astype(jnp.int32), axis=2)
    return (1.0 - w) * z_low + w * z_high


class CoPE(PositionEncoding):
    """Learned position embeddings e (npos_max, d_head), shared by the heads."""

    table: Float[Array, "P Dh"]

    def __init__(self, npos_max: int, head_dim: int):
        self.table = jnp.zeros((npos_max, head_dim), jnp.float32)

    def contextual_bias(
        self,
        q: Float[Array, "H Lq Dh"],
        logits: Float[Array, "H Lq Lk"],
        visible: Bool[Array, "Lq Lk"],
    ) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk): the interpolated q_i . e[p_ij] of queries q (H, Lq, Dh) for keys
        0..Lk-1, from their logits (H, Lq, Lk); 0 where `visible` (Lq, Lk) is False."""
        p = contextual_positions(logits, visible, self.table.shape[0])
        z = jnp.einsum("hqd,pd->hqp", q.astype(jnp.float32), self.table)
        return jnp.where(visible[None], interpolate(z, p), 0.0)

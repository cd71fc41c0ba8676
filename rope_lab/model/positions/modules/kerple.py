"""KERPLE's modules (Chi et al. 2022): the learned per-head distance penalties, log and power
variants, trained through maps onto their domains (configs: `positions/kerple.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from rope_lab.model.positions.kerple import inverse_double_sigmoid, inverse_softplus
from rope_lab.model.positions.modules.base import PositionEncoding


class KerpleLog(PositionEncoding):
    """Learned per-head r1, r2 > 0 (stored as softplus preimages, shape (H,))."""

    raw_r1: Float[Array, " H"]
    raw_r2: Float[Array, " H"]

    def __init__(self, heads: int, r1: float, r2: float):
        self.raw_r1 = jnp.full((heads,), inverse_softplus(r1), jnp.float32)
        self.raw_r2 = jnp.full((heads,), inverse_softplus(r2), jnp.float32)

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk): -r1 log(1 + r2 |p_i - p_j|) for queries (Lq,) and keys (Lk,)."""
        distance = jnp.abs(
            q_positions.astype(jnp.float32)[:, None] - k_positions.astype(jnp.float32)[None]
        )
        r1 = jax.nn.softplus(self.raw_r1)[:, None, None]
        r2 = jax.nn.softplus(self.raw_r2)[:, None, None]
        return -r1 * jnp.log1p(r2 * distance[None])


class KerplePower(PositionEncoding):
    """Learned per-head r1 > 0 (a softplus preimage) and 0 < r2 < 2 (a 2 * sigmoid preimage),
    shape (H,) each."""

    raw_r1: Float[Array, " H"]
    raw_r2: Float[Array, " H"]

    def __init__(self, heads: int, r1: float, r2: float):
        self.raw_r1 = jnp.full((heads,), inverse_softplus(r1), jnp.float32)
        self.raw_r2 = jnp.full((heads,), inverse_double_sigmoid(r2), jnp.float32)

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk): -r1 |p_i - p_j| ** r2 for queries (Lq,) and keys (Lk,).

        The power is taken of the distance with 0 replaced by 1 and then set to 0 there, so
        the gradient in r2 (|d| ** r2 log |d|) is never evaluated at log 0.
        """
        distance = jnp.abs(q_positions[:, None] - k_positions[None]).astype(jnp.float32)[None]
        r1 = jax.nn.softplus(self.raw_r1)[:, None, None]
        r2 = 2.0 * jax.nn.sigmoid(self.raw_r2)[:, None, None]
        apart = distance > 0
        power = jnp.where(apart, jnp.where(apart, distance, 1.0) ** r2, 0.0)
        return -r1 * power

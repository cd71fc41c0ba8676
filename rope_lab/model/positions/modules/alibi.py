"""ALiBi's module (Press et al. 2022): the per-head linear distance penalty on the logits
(config and slopes: `positions/alibi.py`)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from rope_lab.model.positions.alibi import alibi_slopes
from rope_lab.model.positions.modules.base import Frozen, PositionEncoding


class ALiBi(PositionEncoding):
    """logit(i, j) -= slope_h * (p_i - p_j)."""

    slopes: Frozen

    def __init__(self, heads: int):
        self.slopes = Frozen(jnp.asarray(alibi_slopes(heads), jnp.float32))

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk) bias from the distance between query (Lq,) and key (Lk,) positions."""
        distance = q_positions.astype(jnp.float32)[:, None] - k_positions.astype(jnp.float32)[None]
        return -self.slopes.get()[:, None, None] * distance[None]

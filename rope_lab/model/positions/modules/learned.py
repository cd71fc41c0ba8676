"""The learned absolute table's module: rows at the given positions added to the input
(config: `positions/learned.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from rope_lab.model.positions.modules.base import PositionEncoding


class LearnedPE(PositionEncoding):
    """Learned absolute table of shape (max_length, D); untrained rows keep their init."""

    table: Float[Array, "P D"]

    def __init__(self, max_length: int, width: int, *, key: PRNGKeyArray, std: float = 1.0):
        self.table = std * jax.random.normal(key, (max_length, width))

    def embed(self, positions: Array) -> Float[Array, "*B L D"]:
        """Rows of the table at integer positions (*B, L)."""
        return self.table[positions.astype(jnp.int32)]

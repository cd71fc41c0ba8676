"""Randomised positions drawn in JAX (Ruoss et al. 2023): sorted random subsets of a longer
range, per sequence of a batch (`model.position.randomized`; the check is
`positions/randomized.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int, PRNGKeyArray

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig


def random_positions(length: int, max_length: int, *, key: PRNGKeyArray) -> Int[Array, " L"]:
    """Sorted random subset of [0, max_length) of size `length`."""
    chosen = jax.random.choice(key, max_length, (length,), replace=False)
    return jnp.sort(chosen).astype(jnp.int32)


def batch_positions(
    cfg: TrialConfig, batch_size: int, length: int, *, key: PRNGKeyArray
) -> Int[Array, "B L"]:
    """Positions for a batch (B, L): 0..L-1, or sorted random subsets when randomized."""
    pos = cfg.model.position
    if pos.randomized:
        keys = jax.random.split(key, batch_size)
        assert pos.random_max_length is not None
        max_len = max(pos.random_max_length, length)
        return jax.vmap(lambda k: random_positions(length, max_len, key=k))(keys)
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch_size, length))

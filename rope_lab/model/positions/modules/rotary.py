"""The rotary module: q and k rotated by position x frequency (`RotaryPE`), and
`with_rope_scaling`, which swaps its frequencies (config and frequencies: `positions/rotary.py`).

The frequencies are fixed buffers (`Frozen`), so swapping them for another scaling method at
evaluation does not recompile.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from rope_lab.model import rotation
from rope_lab.model.positions.modules.base import Frozen, PositionEncoding


class RotaryPE(PositionEncoding):
    """Rotary embedding in the half-split layout, with swappable frequencies."""

    inv_freq: Frozen
    attention_factor: Frozen

    def __init__(self, inv_freq: np.ndarray, attention_factor: float):
        self.inv_freq = Frozen(jnp.asarray(inv_freq, jnp.float32))
        self.attention_factor = Frozen(jnp.asarray(attention_factor, jnp.float32))

    def rotate(self, q: Array, k: Array, positions: Array) -> tuple[Array, Array]:
        """Rotate the first rotary_dim dims of q and k (L, H, Dh) by position x frequency."""
        inv_freq, factor = self.inv_freq.get(), self.attention_factor.get()
        return (
            rotation.apply_rotary(q, positions, inv_freq, factor),
            rotation.apply_rotary(k, positions, inv_freq, factor),
        )


def with_rope_scaling(encoding: RotaryPE, inv_freq: np.ndarray, attention_factor: float):
    """The same rotary encoding with new frequencies (same shapes: no recompilation).

    The new arrays are placed like the old ones: a compiled program is keyed on its arguments'
    shardings too, so an uncommitted array in place of a committed one would recompile it."""
    old = (encoding.inv_freq.value, encoding.attention_factor.value)
    new = [jnp.asarray(x, jnp.float32) for x in (inv_freq, attention_factor)]
    new = [_placed_like(x, o) for x, o in zip(new, old, strict=True)]
    return eqx.tree_at(lambda e: (e.inv_freq.value, e.attention_factor.value), encoding, new)


def _placed_like(new: Array, old: Array) -> Array:
    if isinstance(old, jax.core.Tracer) or not isinstance(old, jax.Array):
        return new
    return jax.device_put(new, old.sharding) if old.committed else new

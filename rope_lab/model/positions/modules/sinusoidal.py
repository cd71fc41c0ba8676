"""The sinusoidal embedding's module (Vaswani et al. 2017; config: `positions/sinusoidal.py`)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from rope_lab.model.positions.modules.base import PositionEncoding


class SinusoidalPE(PositionEncoding):
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = base^(-2i / D)."""

    width: int = eqx.field(static=True)
    base: float = eqx.field(static=True, default=10000.0)

    def embed(self, positions: Array) -> Float[Array, "*B L D"]:
        """(*B, L, D) sinusoids at positions (*B, L)."""
        half = (self.width + 1) // 2
        freqs = self.base ** (-2.0 * jnp.arange(half, dtype=jnp.float32) / self.width)
        angles = positions.astype(jnp.float32)[..., None] * freqs.reshape(
            (1,) * positions.ndim + (half,)
        )
        pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
        return pe.reshape(*positions.shape, 2 * half)[..., : self.width]

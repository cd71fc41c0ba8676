"""Sinusoidal absolute position embeddings (Vaswani et al. 2017)."""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from rope_lab.model.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS


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


@POSITIONS.register("sinusoidal")
@dataclass(frozen=True)
class SinusoidalConfig(EncodingConfig):
    """Fixed sinusoids of the model width (no fields)."""

    label = "sinusoidal"
    order = 2
    color = "#bcbd22"
    hooks = frozenset({"embed"})
    family = "absolute"
    shift_invariant = False

    def build(self, model, *, max_length, train_length, key) -> SinusoidalPE:
        """Sinusoids of width `model.width`."""
        return SinusoidalPE(model.width)

"""KERPLE-log (Chi et al. 2022): a learned logarithmic distance penalty per head.

bias(i, j) = -r1_h * log(1 + r2_h * |p_i - p_j|), with r1_h, r2_h > 0 learned per head. The
constraint is kept by training unconstrained values through a softplus (the paper clamps them
after each step; softplus keeps the same domain with a smooth gradient). One set of
parameters serves every layer, like rope_lab's other encodings.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rope_lab.config import ConfigError
from rope_lab.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y, for y > 0."""
    return float(y + np.log(-np.expm1(-y)))


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


@POSITIONS.register("kerple_log")
@dataclass(frozen=True)
class KerpleLogConfig(EncodingConfig):
    """Initial r1 and r2 of every head (`model.position.kerple_log.r1_init`, `.r2_init`)."""

    r1_init: float = 1.0
    r2_init: float = 1.0

    label = "KERPLE-log"
    order = 5
    color = "#17becf"
    hooks = frozenset({"bias"})

    def build(self, model, *, max_length, train_length, key) -> KerpleLog:
        """r1, r2 of `model.n_heads` heads at their initial values."""
        return KerpleLog(model.n_heads, self.r1_init, self.r2_init)

    def n_params(self, model, *, max_length) -> int:
        """Two scalars per head."""
        return 2 * model.n_heads

    def check(self, trial, path) -> None:
        """Both initial values must be positive."""
        super().check(trial, path)
        for name in ("r1_init", "r2_init"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"{path}.{name}: must be > 0, got {value!r}")

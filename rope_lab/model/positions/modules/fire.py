"""FIRE's module (Li et al. 2023): an MLP of the progressively interpolated relative distance
psi(i - j) / psi(max(L, i)), one output per head (config: `positions/fire.py`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from rope_lab.model.positions.modules.base import PositionEncoding


class Fire(PositionEncoding):
    """MLP w1, b1 (hidden,), w2 (H, hidden), b2 (H,); log c and log L (scalars)."""

    w1: Float[Array, " hidden"]
    b1: Float[Array, " hidden"]
    w2: Float[Array, "H hidden"]
    b2: Float[Array, " H"]
    log_c: Float[Array, ""]
    log_threshold: Float[Array, ""]

    def __init__(self, heads: int, hidden: int, c: float, threshold: float, *, key: PRNGKeyArray):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        # PyTorch nn.Linear's default, as in the paper's code: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        uniform = lambda k, shape, fan_in: jax.random.uniform(
            k, shape, jnp.float32, -(fan_in**-0.5), fan_in**-0.5
        )
        self.w1 = uniform(k1, (hidden,), 1)
        self.b1 = uniform(k2, (hidden,), 1)
        self.w2 = uniform(k3, (heads, hidden), hidden)
        self.b2 = uniform(k4, (heads,), hidden)
        self.log_c = jnp.asarray(math.log(c), jnp.float32)
        self.log_threshold = jnp.asarray(math.log(threshold), jnp.float32)

    def mlp_input(self, q_positions: Array, k_positions: Array) -> Float[Array, "Lq Lk"]:
        """(Lq, Lk): psi(max(i - j, 0)) / psi(max(L, i)) for queries (Lq,) and keys (Lk,)."""
        q = q_positions.astype(jnp.float32)
        k = k_positions.astype(jnp.float32)
        c, threshold = jnp.exp(self.log_c), jnp.exp(self.log_threshold)
        distance = jnp.maximum(q[:, None] - k[None, :], 0.0)
        normaliser = jnp.log1p(c * jnp.maximum(threshold, q))  # >= log(1 + c L) > 0
        return jnp.log1p(c * distance) / normaliser[:, None]

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"]:
        """(H, Lq, Lk): f_theta(mlp_input)_h for queries (Lq,) and keys (Lk,)."""
        x = self.mlp_input(q_positions, k_positions)  # (Lq, Lk); hidden: (Lq, Lk, hidden)
        hidden = jax.nn.relu(x[..., None] * self.w1[None, None] + self.b1[None, None])
        return jnp.einsum("qkd,hd->hqk", hidden, self.w2) + self.b2[:, None, None]

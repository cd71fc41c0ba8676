"""FIRE (Li et al. 2023, arXiv 2310.04418): a learned function of a progressively
interpolated relative distance.

bias_h(i, j) = f_theta(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(c x + 1), where i is the
query's position value and j the key's (offset or randomised positions included), f_theta an
MLP 1 -> hidden -> H (one hidden layer, ReLU; one output per head), and c > 0 and the threshold
L > 0 learned scalars. For j <= i the MLP input lies in [0, 1] at every length: beyond L the
distance is normalised by the query's own position, so a longer sequence interpolates the
training range instead of leaving it. While i <= L the normaliser is the constant psi(L) and
the bias depends on i - j only. Pairs with j > i (masked by causal attention) use the distance
clamped at 0.

Initialisation, after the reference implementation in the paper's appendix: hidden width 32,
c = 0.1, L = 512 (its models train on 2048-token sequences, so L < the training length and
the normaliser varies during training), MLP layers as PyTorch's `nn.Linear` default (weights
and biases uniform in +-1/sqrt(fan_in)). `threshold_init: null` starts L at the training
length instead, which keeps the MLP's inputs at any evaluation length inside those seen in
training also when rope_lab trains on sequences much shorter than 512. The paper keeps c and
L positive with abs() (L as a frozen init times a learned multiplier); here both are stored
as logarithms and used through exp, so an Adam step changes them by a relative amount, as the
paper's multiplier does.

The paper's FIRE has one MLP per layer; rope_lab shares one position module across all
layers, so here one MLP, c and L serve every layer. The bias of a block costs an
(Lq, Lk, hidden) intermediate, `hidden` times the bias itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from rope_lab.model.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError


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


@POSITIONS.register("fire")
@dataclass(frozen=True)
class FireConfig(EncodingConfig):
    """MLP width and initial c and L (`model.position.fire.hidden`, `.c_init`,
    `.threshold_init`; threshold_init None: the training length)."""

    hidden: int = identity(32)
    c_init: float = identity(0.1)
    threshold_init: float | None = identity(512.0)

    label = "FIRE"
    order = 8
    color = "#8c564b"
    hooks = frozenset({"bias"})
    family = "relative"
    learned = True
    shift_invariant = False  # distances are normalised by the query position

    def build(self, model, *, max_length, train_length, key) -> Fire:
        """An MLP of `hidden` units with `model.n_heads` outputs, drawn from `key`."""
        threshold = self.threshold_init if self.threshold_init is not None else train_length
        return Fire(model.n_heads, self.hidden, self.c_init, float(threshold), key=key)

    def bias_floats_per_pair(self, model) -> int:
        """The MLP's (hidden,) activations per pair, then one bias per head."""
        return self.hidden + model.n_heads

    def n_params(self, model, *, max_length) -> int:
        """MLP weights and biases (1 -> hidden -> H), plus c and L."""
        return 2 * self.hidden + (self.hidden + 1) * model.n_heads + 2

    def check(self, trial, path) -> None:
        """hidden >= 1; c_init > 0; threshold_init > 0 when set."""
        super().check(trial, path)
        if not self.hidden >= 1:
            raise ConfigError(f"{path}.hidden: must be >= 1, got {self.hidden!r}")
        for name in ("c_init", "threshold_init"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{path}.{name}: must be > 0, got {value!r}")

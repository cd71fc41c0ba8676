"""KERPLE (Chi et al. 2022): a learned distance penalty per head, in two variants.

- `kerple_log`: bias(i, j) = -r1_h * log(1 + r2_h * |p_i - p_j|), with r1_h, r2_h > 0;
- `kerple_power`: bias(i, j) = -r1_h * |p_i - p_j| ** r2_h, with r1_h > 0 and 0 < r2_h <= 2.

The paper clamps the parameters into their domain after each step; here unconstrained values
are trained through a map onto the domain instead, with a smooth gradient: softplus for the
positive r1 (both variants) and the log variant's r2, 2 * sigmoid for the power variant's r2
(which reaches (0, 2), the open interval: r2 = 2 itself would need an infinite preimage). One
set of parameters serves every layer, like rope_lab's other encodings.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rope_lab.model.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y, for y > 0."""
    return float(y + np.log(-np.expm1(-y)))


def inverse_double_sigmoid(y: float) -> float:
    """x with 2 * sigmoid(x) = y, for 0 < y < 2."""
    return float(np.log(y / (2.0 - y)))


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

    r1_init: float = identity(1.0)
    r2_init: float = identity(1.0)

    label = "KERPLE-log"
    order = 5
    color = "#17becf"
    hooks = frozenset({"bias"})
    family = "relative"
    learned = True

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


@POSITIONS.register("kerple_power")
@dataclass(frozen=True)
class KerplePowerConfig(EncodingConfig):
    """Initial r1 and r2 of every head (`model.position.kerple_power.r1_init`, `.r2_init`)."""

    r1_init: float = identity(1.0)
    r2_init: float = identity(1.0)

    label = "KERPLE-power"
    order = 7
    color = "#e377c2"
    hooks = frozenset({"bias"})
    family = "relative"
    learned = True

    def build(self, model, *, max_length, train_length, key) -> KerplePower:
        """r1, r2 of `model.n_heads` heads at their initial values."""
        return KerplePower(model.n_heads, self.r1_init, self.r2_init)

    def n_params(self, model, *, max_length) -> int:
        """Two scalars per head."""
        return 2 * model.n_heads

    def check(self, trial, path) -> None:
        """r1_init > 0 and 0 < r2_init < 2."""
        super().check(trial, path)
        if not self.r1_init > 0:
            raise ConfigError(f"{path}.r1_init: must be > 0, got {self.r1_init!r}")
        if not 0 < self.r2_init < 2:
            raise ConfigError(
                f"{path}.r2_init: must be in (0, 2), got {self.r2_init!r} "
                "(strictly below 2: r2 = 2 * sigmoid(raw) reaches 2 only at raw = inf)"
            )

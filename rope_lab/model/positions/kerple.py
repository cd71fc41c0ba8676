"""KERPLE (Chi et al. 2022): a learned distance penalty per head, in two variants.

- `kerple_log`: bias(i, j) = -r1_h * log(1 + r2_h * |p_i - p_j|), with r1_h, r2_h > 0;
- `kerple_power`: bias(i, j) = -r1_h * |p_i - p_j| ** r2_h, with r1_h > 0 and 0 < r2_h <= 2.

The paper clamps the parameters into their domain after each step; here unconstrained values
are trained through a map onto the domain instead, with a smooth gradient: softplus for the
positive r1 (both variants) and the log variant's r2, 2 * sigmoid for the power variant's r2
(which reaches (0, 2), the open interval: r2 = 2 itself would need an infinite preimage). One
set of parameters serves every layer, like rope_lab's other encodings. This module is the
configs and the preimage maps (NumPy); the bias modules are `modules/kerple.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.kerple import KerpleLog, KerplePower


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = y, for y > 0."""
    return float(y + np.log(-np.expm1(-y)))


def inverse_double_sigmoid(y: float) -> float:
    """x with 2 * sigmoid(x) = y, for 0 < y < 2."""
    return float(np.log(y / (2.0 - y)))


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
        from rope_lab.model.positions.modules.kerple import KerpleLog  # deferred: imports JAX

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
        from rope_lab.model.positions.modules.kerple import KerplePower  # deferred: imports JAX

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

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
(Lq, Lk, hidden) intermediate, `hidden` times the bias itself. This module is the config; the
MLP's module `Fire` is `modules/fire.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.fire import Fire


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
        from rope_lab.model.positions.modules.fire import Fire  # deferred: imports JAX

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

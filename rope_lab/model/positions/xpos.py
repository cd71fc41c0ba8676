"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE with an exponential decay.

Rotation pair i (dims i and i + R/2 of the rotated part, R = rotary_dim) has frequency inv_freq_i
and decay base zeta_i = (2 i / R + gamma) / (1 + gamma) < 1. The query at position n is rotated
and multiplied by zeta_i^(n / scale_base), the key at m rotated and divided by zeta_i^(m /
scale_base), so their logit is RoPE's times zeta_i^((n - m) / scale_base) per pair: it depends
on n - m only and decays with distance, most for the fastest-rotating pairs.

Positions are not re-centred (the paper's code centres them on the sequence): a cached key's
scale must not depend on the query, so the scale grows with the absolute position and float32
bounds the longest length (`max_length_float32`; longer evaluations are refused).
Everything rotary (training-time scaling, evaluation under every registered scaling,
fine-tuning, decoding) comes from `RotaryConfig`. This module is the config and the decay
bases (NumPy); the decaying module `XPosPE` is `modules/xpos.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rope_lab.model.positions.rotary import RotaryConfig
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.xpos import XPosPE

# largest |log| of a float32 scale kept, with margin below log(float32 max) = 88.7
_LOG_RANGE = 80.0


def decay_bases(rotary_dim: int, gamma: float) -> np.ndarray:
    """(rotary_dim // 2,) zeta_i = (2 i / rotary_dim + gamma) / (1 + gamma)."""
    i = np.arange(rotary_dim // 2, dtype=np.float64)
    return (2.0 * i / rotary_dim + gamma) / (1.0 + gamma)


@POSITIONS.register("xpos")
@dataclass(frozen=True)
class XPosConfig(RotaryConfig):
    """xPos: RoPE's fields plus the decay's `gamma` (0.4 in the paper) and `scale_base` (512)."""

    gamma: float = identity(0.4)
    scale_base: float = identity(512.0)

    label = "xPos"
    order = 10
    color = "#1f77b4"

    def make_module(self, inv_freq, attention_factor, model) -> XPosPE:
        """RoPE's frequencies with the decay bases of the model's rotary dims."""
        from rope_lab.model.positions.modules.xpos import XPosPE  # deferred: imports JAX

        zeta = decay_bases(self.rotary_dim(model), self.gamma)
        return XPosPE(inv_freq, attention_factor, zeta, self.scale_base)

    def max_length_float32(self, rotary_dim: int) -> int:
        """Longest position whose scale zeta_min^(-position / scale_base) stays in float32."""
        smallest = float(decay_bases(rotary_dim, self.gamma)[0])
        return int(self.scale_base * _LOG_RANGE / -math.log(smallest))

    def check(self, trial, path) -> None:
        """RoPE's checks; gamma > 0, scale_base > 0, every evaluated length within float32."""
        super().check(trial, path)
        if not self.gamma > 0:
            raise ConfigError(f"{path}.gamma: must be > 0, got {self.gamma!r}")
        if not self.scale_base > 0:
            raise ConfigError(f"{path}.scale_base: must be > 0, got {self.scale_base!r}")
        limit = self.max_length_float32(self.rotary_dim(trial.model))
        longest = trial.max_length  # evaluated, fine-tuned, NTK-probed or trained
        if longest > limit:
            raise ConfigError(
                f"{path}.scale_base: positions up to {longest} are used, but the decay "
                f"zeta^(-m / {self.scale_base:g}) leaves float32 past position {limit}; "
                "raise scale_base"
            )

"""``proportional``: HF's proportional RoPE (Gemma-style partial rotary): only the first
``int(partial_rotary_factor * d // 2)`` frequencies are non-zero, each ``theta ** (-2i / d)``
with the exponent over the whole head ``d = rotary_dim``, then all divided by `factor`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _base_inv_freq, _is_real, _output
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@SCALINGS.register("proportional")
@dataclass(frozen=True)
class Proportional(Scaling):
    """Proportional RoPE; `partial_rotary_factor` in (0, 1] is the rotated share of the head."""

    partial_rotary_factor: float = identity(1.0)

    order = 9
    colors = ("#d7c4b7", "#5d4037")

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, then 0 < partial_rotary_factor <= 1."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        p = self.partial_rotary_factor
        if not (_is_real(p) and 0 < p <= 1):
            raise ValueError(f"partial_rotary_factor must be a number in (0, 1], got {p!r}")

    def rotated(self, rotary_dim: int) -> int:
        """How many of the d/2 frequencies are non-zero, rounded as HF does."""
        return int(float(self.partial_rotary_factor) * rotary_dim // 2)

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32: theta ** (-2i/d) / factor for i < `rotated(d)`, zeros after; 1.0."""
        inv = _base_inv_freq(theta, rotary_dim)
        inv[self.rotated(rotary_dim) :] = 0.0
        return _output(inv / float(factor))

"""``default``: direct extrapolation, ``theta ** (-2i / d)``; ignores `factor` and the lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _base_inv_freq, _output
from rope_lab.registry import SCALINGS


@SCALINGS.register("default")
@dataclass(frozen=True)
class Default(Scaling):
    """Unscaled RoPE frequencies (d/2,), attention factor 1."""

    uses_factor = False
    order = 0
    colors = ("#d62728", "#d62728")

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 theta ** (-2i/d), and 1.0."""
        return _output(_base_inv_freq(theta, rotary_dim))

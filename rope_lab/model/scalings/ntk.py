"""``ntk``: static NTK-aware base change, ``theta * factor ** (d / (d - 2))`` (not in HF)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import (
    NTK_MIN_DIM_WHY,
    Scaling,
    _base_inv_freq,
    _ntk_theta,
    _output,
)
from rope_lab.registry import SCALINGS


@SCALINGS.register("ntk")
@dataclass(frozen=True)
class NTK(Scaling):
    """Default frequencies of the NTK-scaled base, attention factor 1; needs d >= 4."""

    min_rotary_dim = 4
    min_rotary_dim_why = NTK_MIN_DIM_WHY
    order = 2
    colors = ("#c6b3e6", "#54278f")
    not_in_hf = (
        "static NTK-aware base change theta * factor ** (d / (d - 2)); transformers has only "
        "its dynamic form ('dynamic') and 'yarn'"
    )

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 theta' ** (-2i/d) with theta' = theta * factor ** (d / (d - 2))."""
        return _output(_base_inv_freq(_ntk_theta(theta, factor, rotary_dim), rotary_dim))

"""``dynamic``: dynamic NTK; ``default`` up to ``original_length``, then the NTK base change with
the effective factor ``factor * seq_len / original_length - (factor - 1)``."""

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


@SCALINGS.register("dynamic")
@dataclass(frozen=True)
class Dynamic(Scaling):
    """NTK base change growing with seq_len past the training length; attention factor 1."""

    needs_original_length = True
    length_dependent = True
    min_rotary_dim = 4
    min_rotary_dim_why = NTK_MIN_DIM_WHY
    order = 3
    colors = ("#dfc27d", "#8c510a")

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 frequencies for length `seq_len` (None: the training length)."""
        assert original_length is not None
        if seq_len is None or seq_len <= original_length:
            return _output(_base_inv_freq(theta, rotary_dim))
        scale = float(factor) * seq_len / original_length - (float(factor) - 1)
        return _output(_base_inv_freq(_ntk_theta(theta, scale, rotary_dim), rotary_dim))

"""``linear``: position interpolation, ``default / factor``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _base_inv_freq, _output
from rope_lab.registry import SCALINGS


@SCALINGS.register("linear")
@dataclass(frozen=True)
class Linear(Scaling):
    """Every frequency divided by `factor`, attention factor 1."""

    order = 1
    colors = ("#9ecae1", "#08519c")

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 theta ** (-2i/d) / factor, and 1.0."""
        return _output(_base_inv_freq(theta, rotary_dim) / float(factor))

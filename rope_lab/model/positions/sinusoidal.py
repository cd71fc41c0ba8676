"""Sinusoidal absolute position embeddings (Vaswani et al. 2017). The config; the sinusoids'
module is `modules/sinusoidal.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.sinusoidal import SinusoidalPE


@POSITIONS.register("sinusoidal")
@dataclass(frozen=True)
class SinusoidalConfig(EncodingConfig):
    """Fixed sinusoids of the model width (no fields)."""

    label = "sinusoidal"
    order = 2
    color = "#bcbd22"
    hooks = frozenset({"embed"})
    family = "absolute"
    shift_invariant = False

    def build(self, model, *, max_length, train_length, key) -> SinusoidalPE:
        """Sinusoids of width `model.width`."""
        from rope_lab.model.positions.modules.sinusoidal import (
            SinusoidalPE,  # deferred: imports JAX
        )

        return SinusoidalPE(model.width)

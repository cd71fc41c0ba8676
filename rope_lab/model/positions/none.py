"""NoPE: no position encoding; causal masking alone carries order (Kazemnejad et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS


class NoPE(PositionEncoding):
    """No position information: every hook is the identity."""


@POSITIONS.register("none")
@dataclass(frozen=True)
class NoPEConfig(EncodingConfig):
    """NoPE has no fields."""

    label = "NoPE"
    order = 0
    color = "#7f7f7f"
    takes_positions = False

    def build(self, model, *, max_length, train_length, key) -> NoPE:
        """The (empty) NoPE module."""
        return NoPE()

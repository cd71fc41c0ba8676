"""NoPE: no position encoding; causal masking alone carries order (Kazemnejad et al. 2023).
The config; its (empty) module is `modules/none.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.none import NoPE


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
        from rope_lab.model.positions.modules.none import NoPE  # deferred: imports JAX

        return NoPE()

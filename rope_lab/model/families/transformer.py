"""The decoder-only Transformer (`model.family: transformer`, the default): no fields of its
own; its position encoding, layer layout and attention are `model.*` fields."""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.config import ATTENTION, NORM_EPS, TIED_READOUT
from rope_lab.model.families.base import FamilyConfig
from rope_lab.registry import MODELS


@MODELS.register("transformer")
@dataclass(frozen=True)
class TransformerFamily(FamilyConfig):
    """The Transformer of `rope_lab.model.transformer`; the encodings decide scaling."""

    order = 0
    capabilities = frozenset({ATTENTION, TIED_READOUT, NORM_EPS})

    def build(self, model, vocab_size, *, train_length, max_length, key):
        """A `Transformer` (a learned table gets `max_length` rows)."""
        from rope_lab.model.transformer import Transformer  # deferred: imports JAX

        return Transformer(
            model, vocab_size, train_length=train_length, max_length=max_length, key=key
        )

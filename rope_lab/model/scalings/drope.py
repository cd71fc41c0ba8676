"""``drope``: drop the rotary encoding of a trained RoPE model (Gelberg and Cetin, "DroPE",
ICLR 2026). Every frequency is 0, so the rotation is the identity and the model attends with no
position encoding (NoPE) on its RoPE-trained weights. Zero-shot, or recalibrated by the
fine-tuning stage at the training length (the paper's short recalibration at the original
context), never at factor x L_train: the factor changes nothing, so a sweep evaluates one
DroPE stage at factor 1 whatever `eval.factors` holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _output
from rope_lab.registry import SCALINGS


@SCALINGS.register("drope")
@dataclass(frozen=True)
class DroPE(Scaling):
    """Zero frequencies (d/2,): no rotation; attention factor 1."""

    uses_factor = False
    recalibrates_at_train_length = True
    order = 25
    colors = ("#f4a582", "#b2182b")
    not_in_hf = "a Hugging Face rope_type always rotates; DroPE removes the rotation"

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 zeros, and 1.0."""
        return _output(np.zeros(rotary_dim // 2))

"""ALiBi (Press et al. 2022): a fixed linear distance penalty per head on the attention logits.
The config and the head slopes (NumPy); the bias's module is `modules/alibi.py`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.alibi import ALiBi


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (heads,): a geometric sequence 2^(-8/n)^h, interleaved for n not 2^k."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if heads <= 0:
        raise ValueError(f"heads: must be positive, got {heads}")
    if heads & (heads - 1) == 0:
        return np.asarray(power_of_two(heads))
    closest = 2 ** math.floor(math.log2(heads))
    extra = power_of_two(2 * closest)[0::2][: heads - closest]
    return np.asarray(power_of_two(closest) + extra)


@POSITIONS.register("alibi")
@dataclass(frozen=True)
class AlibiConfig(EncodingConfig):
    """Press et al.'s slopes for the model's head count (no fields)."""

    label = "ALiBi"
    order = 3
    color = "#2ca02c"
    hooks = frozenset({"bias"})
    family = "relative"

    def build(self, model, *, max_length, train_length, key) -> ALiBi:
        """Slopes for `model.n_heads` heads."""
        from rope_lab.model.positions.modules.alibi import ALiBi  # deferred: imports JAX

        return ALiBi(model.n_heads)

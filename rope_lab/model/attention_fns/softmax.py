"""Softmax attention (`model.attention_fn: softmax`, the default): weights exp(z_ij) / sum_j
exp(z_ij) over the visible keys, as every attention path computed before variants existed."""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.registry import ATTENTION_FNS


@ATTENTION_FNS.register("softmax")
@dataclass(frozen=True)
class Softmax(AttentionFnConfig):
    """Plain softmax over the visible keys."""

    order = 0
    fused_ok = True

    def slug(self) -> str:
        """Nothing: plain softmax is what every trial id meant before variants existed."""
        return ""

"""Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models"; Qwen3-Next):
each head's attention output is multiplied by a sigmoid gate computed from the attention's
input x before the output projection,

    o_h = (sum_j a_hij v_hj) * sigmoid(x_i W_h),

element-wise (`gated`: W_h is D x head_dim, one gate per head and dimension, as Qwen3-Next
computes it) or head-wise (`gated_head`: W_h is D x 1, one gate per head). The paper reports
that the gate's sparsity removes the attention sink and helps length extension; it leaves the
attention weights themselves as softmax computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.registry import ATTENTION_FNS


@ATTENTION_FNS.register("gated")
@dataclass(frozen=True)
class Gated(AttentionFnConfig):
    """An element-wise output gate (`gate_features` = heads x head_dim)."""

    order = 2
    fused_ok = True  # the gate acts on cuDNN's output like on any other path's

    def gate_features(self, model) -> int:
        """One gate per head and dimension."""
        return model.n_heads * model.d_head


@ATTENTION_FNS.register("gated_head")
@dataclass(frozen=True)
class GatedHead(Gated):
    """A head-wise output gate (`gate_features` = heads)."""

    order = 3

    def gate_features(self, model) -> int:
        """One gate per head."""
        return model.n_heads

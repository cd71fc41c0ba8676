"""The Forgetting Transformer (Lin et al., ICLR 2025): softmax attention whose logits decay by a
data-dependent forget gate per head, f_l = sigmoid(x_l w_h + b_h),

    o_i = sum_j softmax_j(q_i k_j / sqrt(d) + sum_{l=j+1..i} log f_l) v_j,

usually with no position encoding (the decay orders the keys). `fox` is that gate alone; `fox_pro`
adds the paper's element-wise sigmoid output gate, and with `model.qk_norm: true` it is the
paper's "Pro" block less its output normalisation and key/value shifts, which are not built.
The gate's weights take the model's parametrisation and its bias starts at 0 (f = 1/2), as the
authors' default. Cached decoding carries each cached key's cumulative log gate
(`kv_cache.LayerCache.decay`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.registry import ATTENTION_FNS


@ATTENTION_FNS.register("fox")
@dataclass(frozen=True)
class Forgetting(AttentionFnConfig):
    """A forget gate per head (`forget_gate`); its biases are the variant's own parameters."""

    order = 4
    forget_gate = True

    def n_params(self, model) -> int:
        """The forget gate's bias per head (its weights are a matmul)."""
        return model.n_heads


@ATTENTION_FNS.register("fox_pro")
@dataclass(frozen=True)
class ForgettingPro(Forgetting):
    """`fox` with an element-wise sigmoid output gate; with `model.qk_norm: true` (and
    `model.norm: rmsnorm`) it is the paper's Pro block less its output norm and shifts."""

    order = 5

    def gate_features(self, model) -> int:
        """One output gate per head and dimension."""
        return model.n_heads * model.d_head

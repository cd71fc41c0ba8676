"""Hugging Face families rope_lab reads the config of but cannot compute: each refusal is one
`CheckpointError` line naming the file, `model_type` and every feature of the checkpoint
rope_lab's `Transformer` lacks, with the key it comes from (`refuse_family`).

- cohere2 (Command R7B, Command A): a parallel block (h = x + attn(norm x) + mlp(norm x), one
  norm per layer), rotary pairs interleaved (dims 2i, 2i+1; rope_lab rotates i, i + d/2) and a
  `logit_scale` on the tied readout. Its sliding-window RoPE layers and global NoPE layers
  rope_lab has (`model.layers`).
- gemma3_text: sandwich norms (a norm before and after each sublayer), the embedding scaled
  by sqrt(hidden_size), a GeGLU MLP (`hidden_activation`), a `query_pre_attn_scalar` other
  than head_dim, logit soft-capping where set. Its (1 + w) RMSNorm is a weight shift, and its
  local layers' own rope base (`rope_local_base_freq`) a per-layer encoding, both of which
  rope_lab has.
"""

from __future__ import annotations

from rope_lab.hf.fields import CheckpointError, Fields

REFUSED = ("cohere2", "gemma3_text")


def _cohere2(f: Fields) -> list[str]:
    out = ["parallel attention + MLP block (model_type)"]
    scale = f.number("logit_scale", 0.0625)
    if scale != 1.0:
        out.append(f"logit_scale {scale:g} (the logits scaled)")
    out.append("interleaved rotary pairs (model_type; rope_lab rotates half-split pairs)")
    return out


def _gemma3(f: Fields) -> list[str]:
    width = f.integer("hidden_size")
    head_dim = f.integer("head_dim", 256)
    out = [
        "sandwich norms (model_type: pre_feedforward_layernorm, post_feedforward_layernorm)",
        f"embedding scaled by sqrt(hidden_size {width})",
    ]
    act = f.string("hidden_activation", "gelu_pytorch_tanh")
    out.append(f"GeGLU MLP (hidden_activation {act!r}; rope_lab has SwiGLU)")
    scalar = f.number("query_pre_attn_scalar", 256)
    if scalar != head_dim:
        out.append(f"query_pre_attn_scalar {scalar:g} (logits scaled by 1/sqrt of it, not of "
                   f"head_dim {head_dim})")  # fmt: skip
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        cap = f.number(key, None)
        if cap is not None:
            out.append(f"{key} {cap:g}")
    return out


def refuse_family(f: Fields, model_type: str) -> None:
    """CheckpointError naming every feature of a `REFUSED` family's checkpoint rope_lab
    lacks."""
    features = {"cohere2": _cohere2, "gemma3_text": _gemma3}[model_type](f)
    raise CheckpointError(
        f"{f.file}: model_type {model_type!r} is not supported; rope_lab lacks: "
        + "; ".join(features)
    )

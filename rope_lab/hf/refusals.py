"""Hugging Face families rope_lab reads the config of but cannot compute: each refusal is one
`CheckpointError` line naming the file, `model_type` and every feature of the checkpoint
rope_lab's `Transformer` lacks, with the key it comes from (`refuse_family`).

- cohere2 (Command R7B, Command A): a parallel block (h = x + attn(norm x) + mlp(norm x), one
  norm per layer), rotary pairs interleaved (dims 2i, 2i+1; rope_lab rotates i, i + d/2) and a
  `logit_scale` on the tied readout. Its sliding-window RoPE layers and global NoPE layers
  rope_lab has (`model.layers`).

Gemma 3 (gemma3_text) is read by `rope_lab.hf.gemma`; what it cannot compute of a Gemma 3
config (bidirectional attention, another activation) is refused there naming the key.
"""

from __future__ import annotations

from rope_lab.hf.fields import CheckpointError, Fields

REFUSED = ("cohere2",)


def _cohere2(f: Fields) -> list[str]:
    out = ["parallel attention + MLP block (model_type)"]
    scale = f.number("logit_scale", 0.0625)
    if scale != 1.0:
        out.append(f"logit_scale {scale:g} (the logits scaled)")
    out.append("interleaved rotary pairs (model_type; rope_lab rotates half-split pairs)")
    return out


def refuse_family(f: Fields, model_type: str) -> None:
    """CheckpointError naming every feature of a `REFUSED` family's checkpoint rope_lab
    lacks."""
    features = {"cohere2": _cohere2}[model_type](f)
    raise CheckpointError(
        f"{f.file}: model_type {model_type!r} is not supported; rope_lab lacks: "
        + "; ".join(features)
    )

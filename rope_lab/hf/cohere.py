"""Cohere 2 checkpoints (`model_type: cohere2`, transformers' Cohere2ForCausalLM: Command R7B,
Command A) <-> rope_lab's Cohere fields of `ModelConfig`.

A Cohere 2 block is parallel (`model.block: parallel`): h = x + attn(n(x)) + mlp(n(x)) with one
norm n per layer (`input_layernorm`), a LayerNorm without bias (`model.norm:
layernorm_no_bias`, epsilon `layer_norm_eps`); its MLP is SwiGLU, its readout tied to the
embedding by default and its logits multiplied by `logit_scale` (`model.logit_scale`, default
0.0625). Layers are `sliding_attention` (three of every four by default,
`sliding_window_pattern`) or `full_attention`: the sliding layers rotate queries and keys with
the model's one RoPE (a scaling included), the full layers use none (NoPE), as transformers'
Cohere2Attention rotates only where it has a window. transformers sets the head size to
hidden_size / num_attention_heads whatever `head_dim` says, so another `head_dim` is refused.

Rotary pairs: Cohere rotates interleaved pairs of head dims (2i, 2i + 1), rope_lab half-split
pairs (i, i + d/2), both at frequency i. A query-key product is unchanged when queries and keys
have their head dims permuted alike, so the load reorders each head's rows of q_proj and
k_proj (`half_split_rows`: dim 2i to i, 2i + 1 to i + d/2) and rope_lab's rotation then computes
exactly transformers' logits; export puts the rows back (`interleaved_rows`). The values and
the output projection keep their order.
"""

from __future__ import annotations

from typing import Any

from rope_lab.config import LayerConfig, ModelConfig
from rope_lab.hf.fields import CheckpointError, Fields, size_keys
from rope_lab.hf.gemma import refuse_gemma_only
from rope_lab.hf.layouts import NO_SPECIAL_TOKENS, NOPE, layer_types, pattern_of, per_layer

COHERE2 = "cohere2"
# transformers' Cohere2Config defaults: the logit scale, every how many layers one is full,
# the window
LOGIT_SCALE, FULL_EVERY, WINDOW = 0.0625, 4, 4096
NORM = "layernorm_no_bias"


def cohere_model_fields(f: Fields, depth: int) -> dict[str, Any]:
    """The `ModelConfig` fields of a Cohere 2 config of `depth` layers that differ from the
    Llama family's; CheckpointError naming a key rope_lab cannot compute."""
    width, heads = f.integer("hidden_size"), f.integer("num_attention_heads")
    head_dim = f.integer("head_dim", None)
    if width % heads or head_dim not in (None, width // heads):
        raise f.error("head_dim", f"{head_dim} is not hidden_size / num_attention_heads "
                      f"({width} / {heads}), the head size of transformers' Cohere 2")  # fmt: skip
    window = f.integer("sliding_window", WINDOW)
    period = f.integer("sliding_window_pattern", FULL_EVERY)
    types = layer_types(f, depth) or [
        "sliding_attention" if (i + 1) % period else "full_attention" for i in range(depth)
    ]
    sliding, full = LayerConfig(window=window), LayerConfig(position=NOPE)
    return {
        "block": "parallel",
        "norm": NORM,
        "norm_eps": f.number("layer_norm_eps", 1e-5, positive=True),
        "logit_scale": f.number("logit_scale", LOGIT_SCALE, positive=True),
        "layers": pattern_of([sliding if t == "sliding_attention" else full for t in types]),
    }


def is_cohere(model: ModelConfig) -> bool:
    """Whether the model has Cohere 2's parallel block, so that it exports as cohere2."""
    return model.block == "parallel"


def cohere_exported(model: ModelConfig) -> bool:
    """Whether the model exports as Cohere 2 (`is_cohere`), having passed Cohere 2's checks
    (`cohere_config`); CheckpointError naming the first field Cohere 2 cannot hold, or a
    Cohere field set on a model with a sequential block."""
    if is_cohere(model):
        cohere_config(model, 0, {}, 0)
        return True
    if model.norm != "rmsnorm":
        raise CheckpointError(f"model.norm: {model.norm!r} has no Hugging Face Llama-family "
                              "form (export needs 'rmsnorm'; Cohere 2, model.block: parallel, "
                              f"{NORM!r})")  # fmt: skip
    if model.logit_scale != 1.0:
        raise CheckpointError(f"model.logit_scale: {model.logit_scale!r} exports as Cohere 2 "
                              "only (with model.block: parallel)")  # fmt: skip
    return False


def _layout(model: ModelConfig) -> tuple[int, list[str]]:
    """The window and `layer_types` of a Cohere 2 layout; CheckpointError naming
    `model.layers` otherwise."""
    layers = per_layer(model)
    windows = {layer.window for layer in layers if layer.window is not None}
    kinds = set(layers) - {LayerConfig(position=NOPE)}
    if len(windows) != 1 or len(kinds) != 1 or kinds != {LayerConfig(window=min(windows))}:
        raise CheckpointError("model.layers: Cohere 2 (model.block: parallel) exports "
                              "sliding-window layers of one window with the model's RoPE and "
                              "full NoPE layers")  # fmt: skip
    types = ["full_attention" if layer.window is None else "sliding_attention" for layer in layers]
    return windows.pop(), types


def cohere_config(
    model: ModelConfig, vocab_size: int, rope_parameters: dict[str, Any], max_pos: int
) -> dict[str, Any]:
    """The cohere2 config.json of a Cohere-shaped model (`is_cohere`); CheckpointError naming
    the first field Cohere 2 cannot hold."""
    refuse_gemma_only(model)
    needs = {"norm": NORM, "qk_norm": False, "qkv_bias": False, "logit_softcap": None}
    for name, value in needs.items():
        if getattr(model, name) != value:
            raise CheckpointError(f"model.{name}: Cohere 2 (model.block: parallel) needs "
                                  f"{value!r}, got {getattr(model, name)!r}")  # fmt: skip
    if model.n_heads * model.d_head != model.width:
        raise CheckpointError(f"model.head_dim: Cohere 2 needs heads x head_dim = width, got "
                              f"{model.n_heads} x {model.d_head} != {model.width}")  # fmt: skip
    window, types = _layout(model)
    return {
        "architectures": ["Cohere2ForCausalLM"],
        "model_type": COHERE2,
        **size_keys(model, vocab_size),
        "hidden_act": "silu",
        "layer_norm_eps": model.norm_eps,
        "logit_scale": model.logit_scale,
        "tie_word_embeddings": model.tie_embeddings,
        "max_position_embeddings": max_pos,
        "rope_parameters": rope_parameters,
        "attention_bias": False,
        "sliding_window": window,
        "layer_types": types,
        "torch_dtype": "float32",
        **NO_SPECIAL_TOKENS,
    }


def half_split_rows(heads: int, head_dim: int) -> list[int]:
    """Row order that turns a projection's (heads x head_dim) output rows with interleaved
    rotary pairs into half-split ones: new row h d + i is old row h d + 2 i, new row
    h d + d/2 + i old row h d + 2 i + 1."""
    one = [*range(0, head_dim, 2), *range(1, head_dim, 2)]
    return [h * head_dim + i for h in range(heads) for i in one]


def interleaved_rows(heads: int, head_dim: int) -> list[int]:
    """The inverse of `half_split_rows`: half-split rows back to interleaved ones."""
    order = half_split_rows(heads, head_dim)
    inverse = [0] * len(order)
    for new, old in enumerate(order):
        inverse[old] = new
    return inverse

"""Gemma 3 text checkpoints (`model_type: gemma3_text`, transformers' Gemma3ForCausalLM) <->
rope_lab's Gemma fields of `ModelConfig`.

A Gemma 3 block is a sandwich (`model.norm_placement: sandwich`: input_layernorm and
post_attention_layernorm around attention, pre_ and post_feedforward_layernorm around the MLP),
its MLP GeGLU with GELU's tanh approximation (`model.mlp: geglu`), its RMSNorms zero-centred
(`model.norm_zero_centred`: x times 1 + weight, QK-norm included), its embedding scaled by
sqrt(hidden_size) on the way in (`model.scale_embedding`), its attention logits by
1/sqrt(query_pre_attn_scalar) (`model.attention_scale_dim`) and its output logits soft-capped
where `final_logit_softcapping` is set (`model.logit_softcap`). Layers are `sliding_attention`
(five of every six by default) or `full_attention` (`rope_lab.hf.layouts.olmo3_layers`); the
sliding layers have an unscaled RoPE of base `rope_local_base_freq`, a scaling acts on the full
layers only (`gemma_rope_blocks`). transformers' Gemma 3 reads `attn_logit_softcapping`
nowhere, so rope_lab ignores it as well. Bidirectional attention and other activations are
refused naming the key.
"""

from __future__ import annotations

from typing import Any

from rope_lab.config import ModelConfig
from rope_lab.hf.fields import CheckpointError, Fields
from rope_lab.hf.layouts import NO_SPECIAL_TOKENS, sliding_fields

GEMMA3 = "gemma3_text"
GELU_TANH = "gelu_pytorch_tanh"  # transformers' name of GELU's tanh approximation
# transformers' Gemma3TextConfig defaults: the full layers' rope base, the sliding layers',
# every how many layers one is full, the window
GLOBAL_THETA, LOCAL_THETA, FULL_EVERY, WINDOW = 1_000_000.0, 10_000.0, 6, 4096
_LAYER_BLOCKS = ("full_attention", "sliding_attention")
# fields only a Gemma 3 export holds (besides its sandwich norm placement)
_GEMMA_ONLY = ("scale_embedding", "norm_zero_centred", "attention_scale_dim", "logit_softcap")


def gemma_rope_blocks(f: Fields) -> dict[str, dict[str, Any]]:
    """`rope_parameters` per layer type, filled in as transformers' Gemma3TextConfig does: the
    older flat `rope_scaling` goes to the full layers, `rope_theta` (default 1e6) is the full
    layers' base and `rope_local_base_freq` (default 1e4) the sliding layers'."""
    blocks = f.cfg.get("rope_parameters")
    per_type = isinstance(blocks, dict) and set(blocks) <= set(_LAYER_BLOCKS)
    if blocks is not None and not (per_type and all(isinstance(b, dict) for b in blocks.values())):
        raise f.error("rope_parameters", "must hold one JSON object per layer type "
                      f"({', '.join(_LAYER_BLOCKS)}), got {blocks!r}")  # fmt: skip
    out = {
        name: dict((blocks or {}).get(name) or {"rope_type": "default"}) for name in _LAYER_BLOCKS
    }
    scaling = f.cfg.get("rope_scaling")
    if blocks is None and scaling is not None:
        if not isinstance(scaling, dict):
            raise f.error("rope_scaling", f"must be a JSON object, got {scaling!r}")
        out["full_attention"].update(scaling)
    out["full_attention"].setdefault("rope_theta", f.number("rope_theta", GLOBAL_THETA))
    local = f.number("rope_local_base_freq", LOCAL_THETA)
    out["sliding_attention"].setdefault("rope_theta", local)
    return out


def gemma_model_fields(f: Fields, head_dim: int) -> dict[str, Any]:
    """The `ModelConfig` fields of a Gemma 3 config (`head_dim` its head size);
    CheckpointError naming a key rope_lab cannot compute."""
    if f.boolean("use_bidirectional_attention", False):
        raise f.error("use_bidirectional_attention", "true is not supported (rope_lab's "
                      "attention is causal)")  # fmt: skip
    act = f.string("hidden_activation", GELU_TANH)
    if act != GELU_TANH:
        raise f.error("hidden_activation", f"{act!r} is not supported (GeGLU with {GELU_TANH})")
    scalar = f.number("query_pre_attn_scalar", 256, positive=True)
    return {
        "mlp": "geglu",
        "norm_placement": "sandwich",
        "qk_norm": True,
        "scale_embedding": True,
        "norm_zero_centred": True,
        "attention_scale_dim": None if scalar == head_dim else float(scalar),
        "logit_softcap": f.number("final_logit_softcapping", None, positive=True),
    }


def is_gemma(model: ModelConfig) -> bool:
    """Whether the model has Gemma 3's block (sandwich norms), so that it exports as
    gemma3_text (`gemma_fields`)."""
    return model.norm_placement == "sandwich"


def refuse_gemma_only(model: ModelConfig) -> None:
    """CheckpointError naming a Gemma field set on a model that is not Gemma-shaped, or an MLP
    other than the Llama family's SwiGLU."""
    if model.mlp != "swiglu":
        raise CheckpointError(
            f"model.mlp: {model.mlp!r} has no Hugging Face Llama-family form (export needs "
            "'swiglu'; 'geglu' with Gemma 3's sandwich norms)"
        )
    for name in _GEMMA_ONLY:
        value = getattr(model, name)
        if value not in (None, False):
            raise CheckpointError(f"model.{name}: {value!r} exports as Gemma 3 only (with "
                                  "model.norm_placement: sandwich)")  # fmt: skip


def gemma_fields(model: ModelConfig, rope_parameters: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's config.json fields of a Gemma-shaped model (`is_gemma`); CheckpointError
    naming the first field Gemma 3 cannot hold."""
    needs = {"norm_zero_centred": True, "qk_norm": True, "qk_norm_scope": "head",
             "mlp": "geglu", "scale_embedding": True, "qkv_bias": False}  # fmt: skip
    for name, value in needs.items():
        if getattr(model, name) != value:
            raise CheckpointError(f"model.{name}: Gemma 3 (model.norm_placement: sandwich) "
                                  f"needs {value!r}, got {getattr(model, name)!r}")  # fmt: skip
    if model.layers:
        layout = sliding_fields(model, rope_parameters, "Gemma 3")
    else:
        plain = {"rope_type": "default", "rope_theta": rope_parameters["rope_theta"]}
        layout = {
            "sliding_window": WINDOW,
            "layer_types": ["full_attention"] * model.depth,
            "rope_parameters": {"full_attention": rope_parameters, "sliding_attention": plain},
        }
    scalar = model.attention_scale_dim or model.d_head
    return {
        "model_type": GEMMA3,
        "hidden_activation": GELU_TANH,
        "query_pre_attn_scalar": int(scalar) if float(scalar).is_integer() else scalar,
        "final_logit_softcapping": model.logit_softcap,
        "attn_logit_softcapping": None,
        **layout,
        **NO_SPECIAL_TOKENS,
    }

"""Hugging Face `config.json` of the Llama family <-> rope_lab's `ModelConfig`.

`read_config(folder)` maps a local checkpoint's config to a `HFArchitecture`: the model config
(width, depth, heads and key/value heads, head size, MLP, RMSNorm epsilon, biases, QK-norm,
tied readout, sliding window, partial rotary), the vocabulary, the trained RoPE encoding (the
checkpoint's own `rope_parameters`, or the older `rope_scaling` + `rope_theta`, as rope_lab's
`model.position.rope` with the same scaling method) and its training length: the scaling's
`original_max_position_embeddings` where it has one, else `max_position_embeddings`.

Supported `model_type`s (`FAMILIES`): llama (Llama 2 / 3.x, SmolLM2), mistral, qwen2 (q/k/v
biases), qwen3 (QK-norm), phi3 (fused projections, partial rotary) and smollm3 (NoPE layers
by `no_rope_layers`, `rope_lab.hf.layouts`), olmo2 and olmo3 (norms on the sublayers'
outputs, QK-norm over the whole projection; OLMo 3's sliding-window layers by `layer_types`,
with their own `rope_parameters`), gemma3_text (Gemma 3's sandwich norms, GeGLU, scaled
embedding, zero-centred norms, query scalar and sliding layers, `rope_lab.hf.gemma`), cohere2
(parallel block, LayerNorm without bias, logit scale, NoPE full layers: `rope_lab.hf.cohere`).
A field rope_lab cannot
express (an output-projection bias, an MLP bias, an activation other than SiLU, a layer mix of
sliding and full attention, a rope_type without a rope_lab method) is refused naming it; so is
a missing or mistyped field (`rope_lab.hf.fields`) and rope parameters transformers refuses or
calls invalid (`rope_lab.hf.rope_rules`). `HFArchitecture.sizes` are the tensor sizes the
config implies, which `from_hf` holds the tensors to (`rope_lab.hf.shapes`).

`hf_config(model_config, vocab, train_length)` is the way back, for `rope-lab export`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rope_lab.config import LayerConfig, ModelConfig, PositionConfig
from rope_lab.hf.cohere import COHERE2, cohere_config, cohere_exported, cohere_model_fields
from rope_lab.hf.fields import CheckpointError, Fields, local_folder, parse_config, size_keys
from rope_lab.hf.gemma import (
    FULL_EVERY,
    GEMMA3,
    gemma_fields,
    gemma_model_fields,
    gemma_rope_blocks,
    is_gemma,
    refuse_gemma_only,
)
from rope_lab.hf.layouts import (
    is_olmo,
    is_smollm3,
    olmo3_layers,
    olmo_fields,
    smollm3_fields,
    smollm3_layers,
)
from rope_lab.hf.rope_rules import check_rope_parameters, original_length
from rope_lab.hf.shapes import Sizes, sizes_of
from rope_lab.model.positions.rotary import RopeConfig
from rope_lab.roles import NOTHING, Export, roles

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "olmo2", "olmo3", GEMMA3,
            COHERE2)  # fmt: skip
# OLMo 2 / 3: norms on the sublayers' outputs, QK-norm over the whole projection
_OLMO = ("olmo2", "olmo3")
# rope_theta where config.json sets none (transformers' `default_theta` of the family)
_DEFAULT_THETA = {"smollm3": 2000000.0, "olmo3": 500000.0}
# rope_lab scaling method of each HF rope_type (the same name; rope_lab's own `ntk` and
# `proportional` have no HF rope_type)
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
# each method's parameters as HF names them (rope_lab's fields have the same names)
_ROPE_PARAMS = {
    "default": (),
    "linear": (),
    "dynamic": (),
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "attention_factor"),
}
# rope_lab methods that Hugging Face computes under another rope_type: (rope_type, the fixed
# rope_parameters that make it so). transformers 5.24.0's yarn takes an explicit
# `attention_factor` as is (`_compute_yarn_parameters`), so 1.0 leaves YaRN's frequencies alone.
HF_FORMS = {"ntk_by_parts": ("yarn", {"attention_factor": 1.0})}


@dataclass(frozen=True)
class HFArchitecture:
    """What a checkpoint's config.json says, in rope_lab's terms."""

    model_type: str
    model: ModelConfig
    vocab_size: int
    train_length: int  # the trained context: original_max_position_embeddings
    max_position_embeddings: int
    bos_token_id: int | None = None
    eos_token_id: Any = None
    where: str = "config.json"  # the file it was read from, named in errors
    sizes: Sizes | None = None  # the tensor sizes it implies (`rope_lab.hf.shapes`)


def read_config(path: str | Path) -> HFArchitecture:
    """The `HFArchitecture` of the checkpoint folder `path` (see the module docstring)."""
    file = local_folder(path) / "config.json"
    return from_hf_dict(parse_config(file), where=str(file))


def from_hf_dict(cfg: dict[str, Any], where: str = "config.json") -> HFArchitecture:
    """`read_config` of a config already parsed; `where` names it in errors."""
    f = Fields(cfg, where)
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"{where}: model_type {model_type!r} is not supported; supported: {', '.join(FAMILIES)}"
        )
    _refuse(f, model_type)
    width, heads = f.integer("hidden_size"), f.integer("num_attention_heads")
    given_head_dim = f.integer("head_dim", None)
    if given_head_dim is None and width % heads:
        raise f.error("num_attention_heads", f"{heads} does not divide hidden_size {width} "
                      "(and head_dim is not set)")  # fmt: skip
    head_dim = given_head_dim or width // heads
    kv = f.integer("num_key_value_heads", None)
    if kv is not None and heads % kv:
        raise f.error("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
    inter, vocab = f.integer("intermediate_size"), f.integer("vocab_size")
    max_pos = f.integer("max_position_embeddings")
    sizes = sizes_of(
        vocab=vocab, width=width, mlp=inter, heads=heads, kv=kv, head_dim=given_head_dim
    )
    depth = f.integer("num_hidden_layers")
    rope_of = lambda fields: _rope(fields, model_type, max_pos, sizes.head)
    blocks = gemma_rope_blocks(f) if model_type == GEMMA3 else cfg.get("rope_parameters")
    sliding: PositionConfig | None = None
    if (
        model_type in ("olmo3", GEMMA3) and isinstance(blocks, dict) and "full_attention" in blocks
    ):  # OLMo 3, Gemma 3: rope_parameters per layer type, each read as the model's would be
        sliding = rope_of(Fields({**cfg, "rope_parameters": blocks.get("sliding_attention")},
                                 where))[0]  # fmt: skip
        f = Fields({**cfg, "rope_parameters": blocks["full_attention"]}, where)
    position, train_length = rope_of(f)
    if model_type == "olmo3" and sliding is None:  # a flat rope scales the full layers only
        sliding = PositionConfig(kind="rope", options=RopeConfig(theta=position.options.theta))
    window = f.integer("sliding_window", None) if model_type in ("mistral", "phi3") else None
    layers: tuple[LayerConfig, ...] = (LayerConfig(window=window),) if window else ()
    if model_type == "smollm3":
        layers = smollm3_layers(f, depth)
    if model_type in ("olmo3", GEMMA3):
        period = FULL_EVERY if model_type == GEMMA3 else 4
        layers = olmo3_layers(f, depth, None if sliding == position else sliding, period)
    own = gemma_model_fields(f, head_dim) if model_type == GEMMA3 else {}
    own = cohere_model_fields(f, depth) if model_type == COHERE2 else own
    fields: dict[str, Any] = dict(
        width=width,
        depth=depth,
        heads=heads,
        head_dim=head_dim,
        kv_heads=None if kv in (None, heads) else kv,
        mlp_ratio=inter / width,
        norm="rmsnorm",
        mlp="swiglu",
        norm_eps=f.number("rms_norm_eps", 1e-6, positive=True),
        qkv_bias=model_type == "qwen2",
        qk_norm=model_type in ("qwen3", *_OLMO),
        qk_norm_scope="projection" if model_type in _OLMO else "head",
        norm_placement="post" if model_type in _OLMO else "pre",
        tie_embeddings=f.boolean("tie_word_embeddings", model_type in (GEMMA3, COHERE2)),
        position=position,
        layers=layers,
    )
    model = ModelConfig(**{**fields, **own})
    assert model.d_mlp == inter, (model.d_mlp, inter)
    return HFArchitecture(
        model_type=model_type,
        model=model,
        vocab_size=vocab,
        train_length=train_length,
        max_position_embeddings=max_pos,
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_id=cfg.get("eos_token_id"),
        where=where,
        sizes=sizes,
    )


def _refuse(f: Fields, model_type: str) -> None:
    """CheckpointError naming the first field rope_lab cannot express."""
    where = f.file
    act = f.string("hidden_act", "silu")
    if act != "silu" and model_type != GEMMA3:  # Gemma's is hidden_activation
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (SwiGLU with silu)")
    for key in ("attention_bias", "mlp_bias"):
        if f.boolean(key, False):
            raise CheckpointError(
                f"{where}: {key}: true is not supported (rope_lab has q/k/v biases only)"
            )
    if model_type in ("qwen2", "qwen3") and f.boolean("use_sliding_window", False):
        raise CheckpointError(
            f"{where}: use_sliding_window: true (sliding layers above max_window_layers) is not "
            "supported"
        )
    if model_type in ("smollm3", "olmo3", GEMMA3, COHERE2):  # layer_types read with the layout
        return
    types = f.cfg.get("layer_types")
    if types is not None and not (
        isinstance(types, list) and all(isinstance(t, str) for t in types)
    ):
        raise f.error("layer_types", f"must be a list of strings, got {types!r}")
    if types and len(set(types)) > 1:
        raise CheckpointError(f"{where}: layer_types mixes {sorted(set(types))}: not supported")


def _rope(
    f: Fields, model_type: str, max_pos: int, head: tuple[int, str]
) -> tuple[PositionConfig, int]:
    """The trained rotary encoding and the training length, from `rope_parameters` (or the
    older `rope_scaling` + `rope_theta`), held to transformers' rules (`rope_rules`); `head`:
    the head size and the keys it comes from (`Sizes.head`)."""
    head_dim, head_text = head
    key = "rope_parameters" if f.cfg.get("rope_parameters") is not None else "rope_scaling"
    block = {} if f.cfg.get(key) is None else f.cfg[key]
    if not isinstance(block, dict):
        raise f.error(key, f"must be a JSON object, got {block!r}")
    rope = Fields(block, f.file, prefix=f"{key}.")
    kind = rope.string("rope_type", None) or rope.string("type", "default")
    if kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{f.file}: rope_type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}"
        )
    if model_type == "phi3" and kind not in ("default", "longrope"):
        raise rope.error("rope_type", f"{kind!r}: Phi-3 has default or longrope only")
    theta = rope.number("rope_theta", None, positive=True)
    if theta is None:
        theta = f.number("rope_theta", _DEFAULT_THETA.get(model_type, 10000.0), positive=True)
    fraction = rope.number("partial_rotary_factor", None)
    if fraction is None:
        fraction = f.number("partial_rotary_factor", 1.0)
    if not 0 < fraction <= 1:
        raise CheckpointError(
            f"{f.file}: partial_rotary_factor must be in (0, 1], got {fraction:g}"
        )
    rotary_dim = int(head_dim * fraction)
    rotated = f"{head_text} x partial_rotary_factor {fraction:g} = {rotary_dim}"
    if rotary_dim % 2:
        raise CheckpointError(f"{f.file}: {rotated} rotated dims, an odd number")
    original = original_length(f, rope, kind, model_type, max_pos)
    check_rope_parameters(
        rope, kind, max_pos=max_pos, original=original, rotated=(rotary_dim, rotated)
    )
    factor = rope.number("factor", None)
    if factor is None:  # HF's convention for longrope: the ratio of the contexts
        factor = max_pos / original if kind == "longrope" else 1.0
    method = tuple(
        (name, _plain(block[name])) for name in _ROPE_PARAMS[kind] if block.get(name) is not None
    )
    options = RopeConfig(
        theta=theta,
        rotary_fraction=fraction,
        scaling=kind,
        factor=float(factor),
        params=method,
    )
    return PositionConfig(kind="rope", options=options), original


def _plain(value: Any) -> Any:
    """A JSON value as a config value (lists become tuples)."""
    return tuple(value) if isinstance(value, list) else value


def hf_rope_parameters(
    kind: str,
    *,
    theta: float,
    factor: float,
    train_length: int,
    params: dict[str, Any] | None = None,
    partial_rotary_factor: float = 1.0,
) -> tuple[dict[str, Any], int]:
    """Hugging Face's `rope_parameters` and `max_position_embeddings` for rope_lab scaling
    `kind` at `factor` with training length `train_length` (`rope_lab.model.rope.inv_freq`'s
    `original_length`); CheckpointError naming the method and why where transformers has no
    form of it (the method's `not_in_hf`).

    `default`, `linear`, `dynamic`: max_position_embeddings is the training length (HF's
    dynamic NTK grows from there); `yarn`, `llama3`, `longrope`: the training length is
    `original_max_position_embeddings` and max_position_embeddings factor x it; `ntk_by_parts`
    is `yarn` with attention_factor 1.0 (`HF_FORMS`); `proportional` keeps its own
    `partial_rotary_factor` (HF's head_dim is then the rotary dim).
    """
    from rope_lab.registry import SCALINGS

    method = SCALINGS[kind]
    rope_type, fixed = HF_FORMS.get(kind, (kind, {}))
    if rope_type not in ROPE_TYPES and rope_type != "proportional":
        why = method.not_in_hf or "no rope_type of that name"
        raise CheckpointError(f"scaling {kind!r} has no Hugging Face rope_type: {why}")
    out: dict[str, Any] = {"rope_type": rope_type, "rope_theta": float(theta)}
    if rope_type != "default":
        out["factor"] = float(factor)
    if rope_type in ("yarn", "llama3", "longrope"):
        out["original_max_position_embeddings"] = int(train_length)
    given = {k: v for k, v in (params or {}).items() if v is not None}
    out.update({k: list(v) if isinstance(v, tuple | list) else v for k, v in given.items()})
    out.update(fixed)
    if partial_rotary_factor != 1.0 and rope_type != "proportional":
        out["partial_rotary_factor"] = float(partial_rotary_factor)
    stretched = rope_type in ("yarn", "llama3", "longrope")
    max_pos = max(1, round(factor * train_length)) if stretched else int(train_length)
    return out, max_pos


def hf_config(model: ModelConfig, vocab_size: int, train_length: int) -> dict[str, Any]:
    """A Hugging Face config.json (as a dict) for a rope_lab model: llama, qwen2 (q/k/v
    biases) or qwen3 (QK-norm), mistral (one sliding-window layer kind), smollm3 (RoPE and
    NoPE layers), olmo2 / olmo3 (post-norm, `rope_lab.hf.layouts`), gemma3_text (sandwich
    norms, `rope_lab.hf.gemma`), cohere2 (parallel block, `rope_lab.hf.cohere`); CheckpointError
    naming the first field Hugging Face's Llama family cannot express."""
    _exportable(model)
    rope = model.position.options
    params, max_pos = hf_rope_parameters(
        rope.scaling,
        theta=rope.theta,
        factor=rope.factor,
        train_length=train_length,
        params=dict(rope.params),
    )
    if model.block == "parallel":
        return cohere_config(model, vocab_size, params, max_pos)
    if is_gemma(model):
        olmo = gemma_fields(model, params)  # the same shape of fields as OLMo 3's
        model_type = GEMMA3
        params = olmo.pop("rope_parameters")
    elif is_olmo(model):
        olmo = olmo_fields(model, params)
        model_type = olmo["model_type"]
        params = olmo.pop("rope_parameters")
    else:
        model_type = "qwen3" if model.qk_norm else "qwen2" if model.qkv_bias else "llama"
    smollm3 = is_smollm3(model)
    own_layout = smollm3 or is_olmo(model) or is_gemma(model)
    window = None if own_layout or not model.layers else model.layers[0].window
    if window is not None:
        model_type = "mistral"
    if smollm3:
        model_type = "smollm3"
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
            "smollm3": "SmolLM3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
            "olmo3": "Olmo3ForCausalLM", GEMMA3: "Gemma3ForCausalLM"}[model_type]  # fmt: skip
    out: dict[str, Any] = {
        "architectures": [arch],
        "model_type": model_type,
        **size_keys(model, vocab_size),
        "head_dim": model.d_head,
        "hidden_act": "silu",
        "rms_norm_eps": model.norm_eps,
        "tie_word_embeddings": model.tie_embeddings,
        "max_position_embeddings": max_pos,
        "rope_parameters": params,
        "attention_bias": False,
        "torch_dtype": "float32",
    }
    if model_type == "mistral":
        out["sliding_window"] = window
    if smollm3:
        out.update(smollm3_fields(model))
    if is_olmo(model) or is_gemma(model):
        out.update(olmo)
    if is_gemma(model):
        del out["hidden_act"]  # Gemma's is hidden_activation
    return out


def _exportable(m: ModelConfig) -> None:
    """CheckpointError naming the first field of `m` a Llama-family checkpoint cannot hold:
    a field whose declared export (`rope_lab.roles.Export`) allows one value only, then the
    encoding and the layer layout."""
    for f, role in roles(ModelConfig):
        only = role.export.only if isinstance(role.export, Export) else NOTHING
        value = getattr(m, f.name)
        if only is not NOTHING and value != only:
            raise CheckpointError(
                f"model.{f.name}: {value!r} has no Hugging Face Llama-family form "
                f"(export needs {only!r})"
            )
    if m.position.kind != "rope":
        raise CheckpointError(
            f"model.position.kind: {m.position.kind!r} has no Hugging Face Llama-family form "
            "(export needs rope)"
        )
    rope = m.position.options
    if rope.scaling == "proportional":
        raise CheckpointError(
            "model.position.rope.scaling: 'proportional' is not exported: its "
            "partial_rotary_factor would sit in rope_parameters, where the Llama family reads "
            "the partial rotary of the head"
        )
    if rope.scaling not in ROPE_TYPES and rope.scaling not in HF_FORMS:
        from rope_lab.registry import SCALINGS

        why = SCALINGS[rope.scaling].not_in_hf or "no rope_type of that name"
        raise CheckpointError(
            f"model.position.rope.scaling: {rope.scaling!r} has no Hugging Face rope_type ({why})"
        )
    if rope.rotary_fraction != 1.0:
        raise CheckpointError(
            "model.position.rope.rotary_fraction: partial rotary is not in Llama, Mistral or Qwen"
        )
    if m.qk_norm and m.qkv_bias:
        raise CheckpointError("model.qk_norm with model.qkv_bias: no Hugging Face family has both")
    if cohere_exported(m):  # Cohere 2's own checks passed (or the Cohere fields are neutral)
        return
    if is_gemma(m):
        gemma_fields(m, {"rope_theta": rope.theta})  # refuses what Gemma 3 cannot hold
        return
    refuse_gemma_only(m)
    if is_olmo(m):
        olmo_fields(m, {})  # refuses, naming the field, what OLMo 2 / 3 cannot hold
        return
    if is_smollm3(m):
        if m.qk_norm or m.qkv_bias:
            raise CheckpointError("model.layers: NoPE layers export as SmolLM3, which has no "
                                  "q/k/v biases or QK-norm")  # fmt: skip
        return
    if len(m.layers) > 1 or any(
        dataclasses.replace(layer, window=None) != LayerConfig() for layer in m.layers
    ):
        raise CheckpointError(
            "model.layers: one layer kind, optionally with a window (Mistral), or RoPE and NoPE "
            "layers (SmolLM3) export"
        )
    if m.layers and (m.qk_norm or m.qkv_bias):
        raise CheckpointError("model.layers: a sliding window exports as Mistral, which has no "
                              "q/k/v biases or QK-norm")  # fmt: skip

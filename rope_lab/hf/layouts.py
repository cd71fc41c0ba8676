"""Per-layer lists of a Hugging Face config <-> rope_lab's repeating layer layout
(`ModelConfig.layers`).

A config.json lists one entry per layer (SmolLM3's `no_rope_layers`: 1 a RoPE layer, 0 a NoPE
layer; `layer_types`: `full_attention` or `sliding_attention`); rope_lab holds the shortest
pattern of layer kinds that, repeated, gives the depth (`pattern_of`). `smollm3_layers` reads
SmolLM3's lists and `olmo3_layers` OLMo 3's, `per_layer` unrolls a layout, and
`smollm3_fields` writes SmolLM3's lists back for `rope-lab export` (`sliding_fields` OLMo 3's
and Gemma 3's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rope_lab.config import LayerConfig, ModelConfig, PositionConfig
from rope_lab.hf.fields import CheckpointError, Fields

NOPE = PositionConfig(kind="none")
# the families' defaults are ids in their own vocabularies; a rope_lab model has none
NO_SPECIAL_TOKENS = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
LAYER_TYPES = ("full_attention", "sliding_attention")


def pattern_of(layers: list[LayerConfig]) -> tuple[LayerConfig, ...]:
    """The shortest pattern whose repetition is `layers` (its length divides theirs); empty
    when every layer is the default kind."""
    depth = len(layers)
    for period in range(1, depth + 1):
        if depth % period == 0 and all(layers[i] == layers[i % period] for i in range(depth)):
            pattern = tuple(layers[:period])
            return () if pattern == (LayerConfig(),) else pattern
    raise AssertionError("unreachable: the whole list is its own pattern")


def per_layer(model: ModelConfig) -> list[LayerConfig]:
    """Each layer's kind, `model.depth` of them (the pattern repeated)."""
    pattern = model.pattern
    return [pattern[i % len(pattern)] for i in range(model.depth)]


def layer_types(f: Fields, depth: int) -> list[str] | None:
    """`layer_types` (None when absent), each `full_attention` or `sliding_attention`, at least
    `depth` of them (the first `depth` are used, as transformers indexes them by layer)."""
    types = f.cfg.get("layer_types")
    if types is None:
        return None
    if not (isinstance(types, list) and all(t in LAYER_TYPES for t in types)):
        raise f.error("layer_types", f"must be a list of {' or '.join(LAYER_TYPES)}, got {types!r}")
    if len(types) < depth:
        raise f.error("layer_types", f"lists {len(types)} layers, fewer than num_hidden_layers "
                      f"{depth}")  # fmt: skip
    return types[:depth]


def smollm3_layers(f: Fields, depth: int) -> tuple[LayerConfig, ...]:
    """SmolLM3's layout: NoPE where `no_rope_layers` is 0 (by default every
    `no_rope_layer_interval`-th layer, as transformers fills it in), a sliding window where
    `use_sliding_window` and `layer_types` say `sliding_attention`."""
    flags = f.cfg.get("no_rope_layers")
    if flags is None:
        interval = f.integer("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(depth)]
    if not (isinstance(flags, list) and all(x in (0, 1) and x is not True and x is not False
                                            for x in flags)):  # fmt: skip
        raise f.error("no_rope_layers", f"must be a list of 0 (NoPE) and 1 (RoPE), got {flags!r}")
    if len(flags) < depth:
        raise f.error("no_rope_layers", f"lists {len(flags)} layers, fewer than "
                      f"num_hidden_layers {depth}")  # fmt: skip
    window = None
    if f.boolean("use_sliding_window", False):
        window = f.integer("sliding_window", None)
    types = layer_types(f, depth) or ["full_attention"] * depth
    return pattern_of(
        [
            LayerConfig(
                position=None if flags[i] else NOPE,
                window=window if types[i] == "sliding_attention" else None,
            )
            for i in range(depth)
        ]
    )


def olmo3_layers(
    f: Fields, depth: int, sliding_position: PositionConfig | None, period: int = 4
) -> tuple[LayerConfig, ...]:
    """OLMo 3's (and Gemma 3's) layout: `sliding_attention` layers (by default all but every
    `period`-th: three of every four in OLMo 3, five of every six in Gemma 3) attend the
    last `sliding_window` keys under `sliding_position` (their own rope_parameters; None: the
    model's), `full_attention` layers the whole prefix. A scaling, trained or at evaluation,
    acts on the full layers only (`eval_scaling: false` on the sliding ones), as transformers
    scales the `full_attention` rope only."""
    if sliding_position is not None and sliding_position.options.scaling != "default":
        raise f.error("rope_parameters", f"sliding_attention rope_type "
                      f"{sliding_position.options.scaling!r}: rope_lab's layer kinds train "
                      "unscaled")  # fmt: skip
    window = f.integer("sliding_window", 4096)
    types = layer_types(f, depth) or [
        "sliding_attention" if (i + 1) % period else "full_attention" for i in range(depth)
    ]
    sliding = LayerConfig(position=sliding_position, window=window, eval_scaling=False)
    return pattern_of([sliding if t == "sliding_attention" else LayerConfig() for t in types])


def is_smollm3(model: ModelConfig) -> bool:
    """Whether the layout is SmolLM3's: some layers NoPE, the others the model's RoPE, none
    with a window or other option of its own."""
    kinds = set(model.pattern)
    return LayerConfig(position=NOPE) in kinds and kinds <= {
        LayerConfig(),
        LayerConfig(position=NOPE),
    }


def smollm3_fields(model: ModelConfig) -> dict[str, Any]:
    """SmolLM3's config.json fields of a SmolLM3-shaped layout (`is_smollm3`)."""
    flags = [int(layer.position is None) for layer in per_layer(model)]
    if all(flags):
        raise CheckpointError("model.layers: no NoPE layer, not a SmolLM3 layout")
    return {
        "no_rope_layers": flags,
        "use_sliding_window": False,
        "layer_types": ["full_attention"] * model.depth,
        **NO_SPECIAL_TOKENS,
    }


def is_olmo(model: ModelConfig) -> bool:
    """Whether the model has OLMo's block (norms on the sublayers' outputs or QK-norm over
    the whole projection), so that it exports as olmo2 / olmo3 (`olmo_fields`)."""
    return model.norm_placement == "post" or model.qk_norm_scope == "projection"


def _sliding_rope_theta(layer: LayerConfig, model: ModelConfig) -> float | None:
    """The rope base of an OLMo 3 sliding layer kind (None where it has no HF form: an own
    encoding other than an unscaled full RoPE that differs only in its base)."""
    if layer.position is None:
        return model.position.options.theta
    options = layer.position.options
    plain = dataclasses.replace(type(options)(), theta=getattr(options, "theta", None))
    if layer.position != PositionConfig(kind="rope", options=plain):
        return None
    return float(options.theta)


def olmo_fields(model: ModelConfig, rope_parameters: dict[str, Any]) -> dict[str, Any]:
    """OLMo 2's (no layout) or OLMo 3's (full and sliding-window layers) config.json fields of
    an OLMo-shaped model; CheckpointError naming the field OLMo cannot hold."""
    if model.norm_placement != "post" or model.qk_norm_scope != "projection" or not model.qk_norm:
        raise CheckpointError(
            "model.norm_placement / model.qk_norm_scope: only post with QK-norm over the "
            f"projection exports (OLMo 2 / 3); got {model.norm_placement!r}, qk_norm "
            f"{model.qk_norm}, {model.qk_norm_scope!r}"
        )
    if model.qkv_bias:
        raise CheckpointError("model.qkv_bias: OLMo 2 / 3 have no q/k/v biases")
    if not model.layers:
        return {"model_type": "olmo2", "rope_parameters": rope_parameters, **NO_SPECIAL_TOKENS}
    return {"model_type": "olmo3", **sliding_fields(model, rope_parameters, "OLMo 3"),
            **NO_SPECIAL_TOKENS}  # fmt: skip


def sliding_fields(
    model: ModelConfig, rope_parameters: dict[str, Any], family: str
) -> dict[str, Any]:
    """`sliding_window`, `layer_types` and per-layer-type `rope_parameters` (OLMo 3's and
    Gemma 3's form) of a layout of full layers and sliding-window layers of one window whose
    own RoPE differs in theta only; CheckpointError naming `model.layers` otherwise."""
    windows = {layer.window for layer in model.layers if layer.window is not None}
    sliding = [layer for layer in model.layers if layer.window is not None]
    thetas = {_sliding_rope_theta(layer, model) for layer in sliding}
    odd = [layer for layer in model.layers if layer.window is None and layer != LayerConfig()]
    if len(windows) != 1 or len(thetas) != 1 or None in thetas or odd:
        raise CheckpointError(
            f"model.layers: {family} exports full layers and sliding-window layers of one "
            "window (their own RoPE differing in theta only)"
        )
    (window,), (theta,) = windows, thetas
    return {
        "sliding_window": window,
        "layer_types": [
            "full_attention" if layer.window is None else "sliding_attention"
            for layer in per_layer(model)
        ],
        "rope_parameters": {
            "full_attention": rope_parameters,
            "sliding_attention": {"rope_type": "default", "rope_theta": theta},
        },
    }

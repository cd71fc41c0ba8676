"""`rope_lab.hf.layouts`: per-layer lists of a config.json <-> rope_lab's repeating layout."""

from __future__ import annotations

import pytest

from rope_lab.config import LayerConfig, ModelConfig, PositionConfig
from rope_lab.hf import CheckpointError
from rope_lab.hf.config import from_hf_dict
from rope_lab.hf.fields import Fields
from rope_lab.hf.layouts import (
    NOPE,
    is_smollm3,
    olmo3_layers,
    pattern_of,
    per_layer,
    smollm3_fields,
    smollm3_layers,
)
from rope_lab.model.positions.rotary import RopeConfig

ROPE, NOPE_LAYER = LayerConfig(), LayerConfig(position=NOPE)


def test_the_pattern_is_the_shortest_repeating_one():
    assert pattern_of([ROPE] * 6) == ()
    assert pattern_of([ROPE, NOPE_LAYER] * 3) == (ROPE, NOPE_LAYER)
    assert pattern_of([ROPE, ROPE, NOPE_LAYER] * 2) == (ROPE, ROPE, NOPE_LAYER)
    # no shorter period divides the depth: the whole list
    assert pattern_of([ROPE, NOPE_LAYER, ROPE, ROPE]) == (ROPE, NOPE_LAYER, ROPE, ROPE)
    assert pattern_of([ROPE, ROPE, NOPE_LAYER, ROPE, ROPE]) == (ROPE, ROPE, NOPE_LAYER, ROPE, ROPE)


def _smollm3(**cfg):
    return smollm3_layers(Fields(cfg, "c/config.json"), depth=8)


def test_smollm3_layouts_as_transformers_fills_them_in():
    """Without no_rope_layers every `no_rope_layer_interval`-th layer (default 4) is NoPE;
    with use_sliding_window the `sliding_attention` layers get the window."""
    assert _smollm3() == (ROPE, ROPE, ROPE, NOPE_LAYER)
    assert _smollm3(no_rope_layer_interval=2) == (ROPE, NOPE_LAYER)
    assert _smollm3(no_rope_layers=[1, 0, 0, 1] * 2 + [0]) == (ROPE, NOPE_LAYER, NOPE_LAYER, ROPE)
    sliding = ["full_attention", "sliding_attention"] * 4
    got = _smollm3(no_rope_layers=[1, 0] * 4, use_sliding_window=True, sliding_window=5,
                   layer_types=sliding)  # fmt: skip
    assert got == (ROPE, LayerConfig(position=NOPE, window=5))


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"no_rope_layers": [1, 2]}, r"c/config.json: no_rope_layers must be a list of 0 \(NoPE\)"),
        (
            {"no_rope_layers": [1, 0]},
            "no_rope_layers lists 2 layers, fewer than num_hidden_layers 8",
        ),
        ({"layer_types": ["full_attention"] * 7 + ["chunked"]}, "layer_types must be a list of"),
        ({"layer_types": ["full_attention"]}, "layer_types lists 1 layers, fewer than"),
    ],
)
def test_smollm3_refusals_name_the_key(cfg, match):
    with pytest.raises(CheckpointError, match=match):
        _smollm3(**cfg)


def test_smollm3_export_unrolls_the_layout():
    model = ModelConfig(depth=6, layers=(ROPE, ROPE, NOPE_LAYER))
    assert is_smollm3(model) and len(per_layer(model)) == 6
    assert smollm3_fields(model)["no_rope_layers"] == [1, 1, 0, 1, 1, 0]
    assert not is_smollm3(ModelConfig(layers=(ROPE, LayerConfig(window=4))))
    assert not is_smollm3(ModelConfig(layers=(ROPE, LayerConfig(position=NOPE, window=4))))


def _olmo3(sliding_rope, **cfg):
    position = PositionConfig(options=RopeConfig(**sliding_rope)) if sliding_rope else None
    return olmo3_layers(Fields(cfg, "c/config.json"), 8, position)


def test_olmo3_layouts_as_transformers_fills_them_in():
    """Without layer_types three of every four layers slide (window 4096 by default)."""
    local = LayerConfig(window=4096, eval_scaling=False)
    assert _olmo3(None) == (local, local, local, ROPE)
    own = _olmo3({"theta": 500.0}, sliding_window=6, layer_types=["sliding_attention",
                 "full_attention"] * 4)  # fmt: skip
    assert own == (LayerConfig(window=6, position=own[0].position, eval_scaling=False), ROPE)
    assert own[0].position.options.theta == 500.0
    with pytest.raises(CheckpointError, match=r"c/config.json: rope_parameters sliding_attention "
                       r"rope_type 'yarn': rope_lab's layer kinds train unscaled"):  # fmt: skip
        _olmo3({"scaling": "yarn", "factor": 2.0})


def test_a_flat_olmo3_rope_scales_the_full_layers_only():
    """transformers reads a flat rope_parameters as the full_attention one; the sliding
    layers keep an unscaled rope of the same base."""
    rope = {"rope_type": "linear", "factor": 2.0, "rope_theta": 700.0}
    cfg = {"model_type": "olmo3", "hidden_size": 32, "num_attention_heads": 4,
           "intermediate_size": 64, "vocab_size": 96, "num_hidden_layers": 4,
           "max_position_embeddings": 32, "sliding_window": 5, "rope_parameters": rope}  # fmt: skip
    model = from_hf_dict(cfg).model
    assert (model.position.options.scaling, model.position.options.theta) == ("linear", 700.0)
    local = model.layers[0]
    assert (local.window, local.eval_scaling) == (5, False) and model.layers[3] == ROPE
    assert local.position == PositionConfig(options=RopeConfig(theta=700.0))

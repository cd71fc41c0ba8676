"""`rope_lab.hf.layouts`: per-layer lists of a config.json <-> rope_lab's repeating layout."""

from __future__ import annotations

import pytest

from rope_lab.config import LayerConfig, ModelConfig
from rope_lab.hf import CheckpointError
from rope_lab.hf.fields import Fields
from rope_lab.hf.layouts import (
    NOPE,
    is_smollm3,
    pattern_of,
    per_layer,
    smollm3_fields,
    smollm3_layers,
)

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

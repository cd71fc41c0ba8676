"""What rope_lab cannot compute of a Gemma 3 or Cohere 2 config is refused in one line naming
the file and the key, and the configs' defaults and older forms are read as transformers
reads them (`rope_lab.hf.gemma`, `rope_lab.hf.cohere`); configs written by transformers' own
config classes."""

from __future__ import annotations

import pytest

from rope_lab.config import LayerConfig, PositionConfig
from rope_lab.hf import CheckpointError
from rope_lab.hf.config import from_hf_dict
from tests.hf.conftest import transformers_or_skip

SMALL = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 56, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip


def _config(name: str, **fields) -> dict:
    _, transformers = transformers_or_skip()
    return getattr(transformers, name)(**SMALL, **fields).to_dict()


def _refusal(cfg: dict) -> str:
    with pytest.raises(CheckpointError) as err:
        from_hf_dict(cfg, where="c/config.json")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_cohere2_defaults_are_transformers_defaults():
    """Cohere2Config's defaults: a parallel block, a LayerNorm without bias (epsilon 1e-5),
    logits times 0.0625, a tied readout, three sliding-window layers (4096) of four with the
    model's RoPE and a full NoPE layer."""
    cfg = {
        k: v
        for k, v in _config("Cohere2Config").items()
        if k not in ("layer_types", "sliding_window")
    }
    model = from_hf_dict(cfg).model
    assert (model.block, model.norm, model.norm_eps) == ("parallel", "layernorm_no_bias", 1e-5)
    assert (model.logit_scale, model.tie_embeddings, model.mlp) == (0.0625, True, "swiglu")
    sliding, full = LayerConfig(window=4096), LayerConfig(position=PositionConfig(kind="none"))
    assert model.layers == (sliding, sliding, sliding, full)
    every_other = from_hf_dict({**cfg, "sliding_window_pattern": 2}).model
    assert every_other.layers == (sliding, full)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (
            {"head_dim": 16},
            "c/config.json: head_dim 16 is not hidden_size / num_attention_heads (32 / 4), "
            "the head size of transformers' Cohere 2",
        ),
        (
            {"attention_bias": True},
            "c/config.json: attention_bias: true is not supported (rope_lab has q/k/v biases only)",
        ),
        ({"logit_scale": 0}, "c/config.json: logit_scale must be a number > 0, got 0"),
    ],
)
def test_cohere2_refuses_by_name_what_rope_lab_cannot_compute(fields, match):
    assert _refusal({**_config("Cohere2Config"), **fields}) == match


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (
            {"use_bidirectional_attention": True},
            "c/config.json: use_bidirectional_attention true is not supported (rope_lab's "
            "attention is causal)",
        ),
        (
            {"hidden_activation": "gelu"},
            "c/config.json: hidden_activation 'gelu' is not supported (GeGLU with "
            "gelu_pytorch_tanh)",
        ),
    ],
)
def test_gemma3_refuses_by_name_what_rope_lab_cannot_compute(fields, match):
    assert _refusal(_config("Gemma3TextConfig", head_dim=8, **fields)) == match


def test_gemma3_is_read():
    model = from_hf_dict(_config("Gemma3TextConfig", head_dim=8)).model
    assert (model.norm_placement, model.mlp, model.norm_zero_centred) == ("sandwich", "geglu", True)


def test_gemma3_older_flat_rope_fields_fill_in_the_layer_types_as_transformers_does():
    """rope_scaling acts on the full layers, rope_theta is their base, rope_local_base_freq the
    sliding layers' (an unscaled RoPE); the default layout is five sliding layers of six."""
    cfg = {**SMALL, "model_type": "gemma3_text", "head_dim": 8, "num_hidden_layers": 6,
           "max_position_embeddings": 64, "rope_theta": 1000.0, "rope_local_base_freq": 50.0,
           "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "sliding_window": 5}  # fmt: skip
    model = from_hf_dict(cfg).model
    full = model.position.options
    assert (full.theta, full.scaling, full.factor) == (1000.0, "linear", 2.0)
    sliding = model.layers[0]
    assert (sliding.window, sliding.eval_scaling) == (5, False)
    assert sliding.position.options.theta == 50.0
    assert sliding.position.options.scaling == "default"
    assert [layer.window for layer in model.layers] == [5] * 5 + [None]
    bad = {**cfg, "rope_parameters": {"rope_type": "default"}}
    assert _refusal(bad).startswith(
        "c/config.json: rope_parameters must hold one JSON object per layer type "
        "(full_attention, sliding_attention)"
    )

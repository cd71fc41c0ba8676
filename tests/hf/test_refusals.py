"""Families rope_lab cannot compute are refused in one line naming the file, the model_type
and every feature of the checkpoint rope_lab lacks (`rope_lab.hf.refusals`); configs written
by transformers' own config classes."""

from __future__ import annotations

import pytest

from rope_lab.hf import CheckpointError
from rope_lab.hf.config import from_hf_dict
from tests.hf.conftest import transformers_or_skip

SMALL = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 56, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
COHERE2 = (
    "c/config.json: model_type 'cohere2' is not supported; rope_lab lacks: parallel attention "
    "+ MLP block (model_type)"
)


def _config(name: str, **fields) -> dict:
    _, transformers = transformers_or_skip()
    return getattr(transformers, name)(**SMALL, **fields).to_dict()


def _refusal(cfg: dict) -> str:
    with pytest.raises(CheckpointError) as err:
        from_hf_dict(cfg, where="c/config.json")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_cohere2_names_its_parallel_block_logit_scale_and_interleaved_rotary():
    assert _refusal(_config("Cohere2Config")) == (
        COHERE2 + "; logit_scale 0.0625 (the logits scaled); interleaved rotary pairs "
        "(model_type; rope_lab rotates half-split pairs)"
    )
    unscaled = _refusal(_config("Cohere2Config", logit_scale=1.0))
    assert (
        unscaled == COHERE2 + "; interleaved rotary pairs (model_type; rope_lab rotates "
        "half-split pairs)"
    )


def test_gemma3_names_sandwich_norms_embedding_scale_geglu_and_its_query_scalar():
    got = _refusal(_config("Gemma3TextConfig", head_dim=8, query_pre_attn_scalar=16))
    assert got == (
        "c/config.json: model_type 'gemma3_text' is not supported; rope_lab lacks: sandwich "
        "norms (model_type: pre_feedforward_layernorm, post_feedforward_layernorm); embedding "
        "scaled by sqrt(hidden_size 32); GeGLU MLP (hidden_activation 'gelu_pytorch_tanh'; "
        "rope_lab has SwiGLU); query_pre_attn_scalar 16 (logits scaled by 1/sqrt of it, not of "
        "head_dim 8)"
    )
    capped = _refusal(
        _config(
            "Gemma3TextConfig", head_dim=8, query_pre_attn_scalar=8, final_logit_softcapping=30.0
        )
    )
    assert "query_pre_attn_scalar" not in capped
    assert capped.endswith("; rope_lab has SwiGLU); final_logit_softcapping 30")

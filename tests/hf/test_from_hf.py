"""`rope_lab.from_hf`: a checkpoint of every supported family, under every rope_type, gives
`transformers`' logits below and beyond its trained context, and its greedy tokens with a
key/value cache (dynamic NTK: the `per_step_stale` protocol, which is what HF's cache does)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import LayerConfig, PositionConfig
from rope_lab.hf import CheckpointError, read_config
from rope_lab.hf.weights import from_hf
from rope_lab.model.decode import generate
from rope_lab.model.positions.rotary import RopeConfig
from rope_lab.model.transformer import at_length
from tests.hf.conftest import FAMILIES, LENGTHS, ORIGINAL, ROPE_TYPES, VOCAB, hf_logits

TOLERANCE = 1e-4
PHI3_ROPE_TYPES = (
    "default",
    "longrope",
)  # what transformers' Phi3Config accepts  # max |rope_lab - HF| / max |HF|, float32
# the whole family x rope_type matrix under -m slow; by default every family with its own
# default rope and llama under every rope_type
CASES = [
    (family, rope)
    if family == "llama" or rope == "default"
    else pytest.param(family, rope, marks=pytest.mark.slow)
    for family in FAMILIES
    for rope in ROPE_TYPES
    if family != "phi3" or rope in PHI3_ROPE_TYPES
]


def _relative_error(got, want) -> float:
    return float(np.abs(np.asarray(got) - want).max() / np.abs(want).max())


@pytest.mark.parametrize(("family", "rope"), CASES)
def test_logits_equal_transformers(checkpoints, family, rope):
    ckpt = checkpoints(family, rope)
    model = from_hf(ckpt.folder)
    assert model.train_length == ORIGINAL
    rng = np.random.default_rng(0)
    for length in LENGTHS:
        tokens = rng.integers(0, VOCAB, (2, length))
        want = hf_logits(ckpt, tokens)
        got = at_length(model, length)(jnp.asarray(tokens))
        assert _relative_error(got, want) < TOLERANCE, (family, rope, length)


@pytest.mark.parametrize(
    ("family", "rope", "protocol"),
    [
        ("llama", "default", "prefill_fixed"),
        ("mistral", "default", "prefill_fixed"),  # past its sliding window of 10
        ("qwen3", "default", "prefill_fixed"),
        ("olmo3", "default", "prefill_fixed"),  # past its window of 5, local rope base
        ("gemma3", "default", "prefill_fixed"),  # the same, soft-capped logits
        ("cohere2", "default", "prefill_fixed"),  # parallel block, past its window of 5
        pytest.param("smollm3", "default", "prefill_fixed", marks=pytest.mark.slow),
        pytest.param("llama", "dynamic", "per_step_stale", marks=pytest.mark.slow),
        pytest.param("phi3", "default", "prefill_fixed", marks=pytest.mark.slow),
        pytest.param("qwen2", "default", "prefill_fixed", marks=pytest.mark.slow),
    ],
)
def test_greedy_tokens_with_a_cache_equal_transformers(checkpoints, family, rope, protocol):
    """HF `generate` (greedy, its own cache) and rope_lab's cached decoding choose the same
    tokens from the same logits, decoding past the trained context."""
    import torch

    ckpt = checkpoints(family, rope)
    model = from_hf(ckpt.folder)
    prompt = np.random.default_rng(1).integers(0, VOCAB, (10,))
    steps = 20
    with torch.no_grad():
        out = ckpt.hf.generate(
            torch.as_tensor(prompt[None]),
            max_new_tokens=steps,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            pad_token_id=0,
        )
    want_tokens = out.sequences[0, len(prompt) :].numpy()
    want_logits = torch.stack(out.logits)[:, 0].float().numpy()
    scaling = None
    if protocol != "prefill_fixed":
        scaling = ("dynamic", ROPE_TYPES[rope]["factor"], None)
    tokens, logits = generate(
        model, jnp.asarray(prompt), steps, 32, protocol=protocol, scaling=scaling
    )
    np.testing.assert_array_equal(np.asarray(tokens), want_tokens)
    assert _relative_error(logits, want_logits) < TOLERANCE


def test_config_maps_each_family_feature(checkpoints):
    """The features that tell the families apart reach the model config."""
    arch = {f: read_config(checkpoints(f).folder).model for f in FAMILIES}
    assert arch["llama"].n_kv_heads == 2 and not arch["llama"].tie_embeddings
    assert arch["smollm2"].n_kv_heads == 1 and arch["smollm2"].tie_embeddings
    assert arch["mistral"].layers[0].window == 10
    assert arch["qwen2"].qkv_bias and not arch["qwen2"].qk_norm
    assert arch["qwen3"].qk_norm and arch["qwen3"].d_head == 16
    assert arch["qwen3"].attention_width == 64 and arch["qwen3"].width == 32
    assert arch["phi3"].position.options.rotary_fraction == 0.5
    assert arch["llama"].norm_eps == 0.1 and arch["qwen2"].norm_eps == 1e-6
    nope = LayerConfig(position=PositionConfig(kind="none"))
    assert arch["smollm3"].layers == (LayerConfig(), nope) and arch["smollm3"].depth == 4
    olmo2 = arch["olmo2"]
    assert (olmo2.norm_placement, olmo2.qk_norm, olmo2.qk_norm_scope) == (
        "post",
        True,
        "projection",
    )
    local = LayerConfig(
        position=PositionConfig(options=RopeConfig(theta=500.0)), window=5, eval_scaling=False
    )
    assert arch["olmo3"].layers == (local, local, local, LayerConfig())
    assert arch["olmo3"].position.options.theta == 10000.0
    gemma = arch["gemma3"]
    assert gemma.layers == (local, LayerConfig()) and gemma.tie_embeddings
    assert (gemma.norm_placement, gemma.mlp, gemma.qk_norm, gemma.qk_norm_scope) == (
        "sandwich",
        "geglu",
        True,
        "head",
    )
    assert gemma.scale_embedding and gemma.norm_zero_centred
    assert (gemma.attention_scale_dim, gemma.logit_softcap, gemma.d_head) == (12.0, 3.0, 16)
    cohere = arch["cohere2"]
    nope_full = LayerConfig(position=PositionConfig(kind="none"))
    assert cohere.layers == (LayerConfig(window=5), nope_full) and cohere.tie_embeddings
    assert (cohere.block, cohere.norm, cohere.norm_eps) == ("parallel", "layernorm_no_bias", 0.1)
    assert (cohere.logit_scale, cohere.mlp, cohere.d_head) == (0.5, "swiglu", 8)
    yarn = read_config(checkpoints("llama", "yarn").folder)
    rope = yarn.model.position.options
    assert (rope.scaling, rope.factor, yarn.train_length) == ("yarn", 4.0, ORIGINAL)
    assert dict(rope.params)["beta_fast"] == 8.0


def test_refusals_name_what_is_wrong(tmp_path, checkpoints):
    with pytest.raises(CheckpointError, match="not a local folder"):
        from_hf("https://huggingface.co/HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(CheckpointError, match="no such local folder"):
        from_hf(tmp_path / "HuggingFaceTB/SmolLM2-135M")
    config = json.loads((checkpoints("llama").folder / "config.json").read_text())
    cases = [
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
        ({"attention_bias": True}, "attention_bias: true is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"rope_parameters": {"rope_type": "mrope"}}, "rope_type 'mrope' is not supported"),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "mrope_section": [1]}},
            r"rope parameter\(s\) \['mrope_section'\]",
        ),
    ]
    for i, (change, match) in enumerate(cases):
        folder = tmp_path / f"bad{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=match):
            read_config(folder)
    folder = tmp_path / "no_weights"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors files"):
        from_hf(folder)


@pytest.mark.slow  # ~15 s
def test_bfloat16_loading_halves_the_parameters_and_stays_close(checkpoints):
    """dtype="bfloat16" stores every weight in bfloat16 (half the bytes) and computes in it;
    the logits stay within bfloat16's rounding of the float32 model's."""
    folder = checkpoints("llama").folder
    full, half = from_hf(folder), from_hf(folder, dtype="bfloat16")
    nbytes = lambda m: sum(x.nbytes for x in jax.tree.leaves(eqx.filter(m, eqx.is_array)))
    frozen = nbytes((full.position, full.layer_positions))  # float32 frequency buffers in both
    assert nbytes(half) - frozen == (nbytes(full) - frozen) // 2
    tokens = jnp.asarray(np.random.default_rng(2).integers(0, VOCAB, (1, 12)))
    assert 1e-4 < _relative_error(half(tokens), np.asarray(full(tokens))) < 5e-2

"""`rope-lab export TRIAL_DIR --hf OUT`: a rope_lab model written as a Hugging Face checkpoint
that `transformers` loads and reproduces, and that `from_hf` reads back to the same model."""

from __future__ import annotations

import json
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from rope_lab.cli import main
from rope_lab.config import LayerConfig, PositionConfig, replace, validate
from rope_lab.hf import CheckpointError
from rope_lab.hf.weights import from_hf
from rope_lab.model.positions.rotary import RopeConfig
from rope_lab.model.transformer import at_length, trainable
from rope_lab.trial.checkpoint import save_model
from rope_lab.trial.pipeline import CONFIG_FILE, MODEL_FILE
from rope_lab.trial.train import make_model
from rope_lab.trial.trained import load_model
from rope_lab.typed import to_dict
from tests.helpers import tiny_trial
from tests.hf.conftest import hf_logits, transformers_or_skip

NOPE = PositionConfig(kind="none")
OLMO = {"model.norm_placement": "post", "model.qk_norm": True, "model.qk_norm_scope": "projection"}
# an OLMo 3 sliding-window layer kind with a rope base of its own
LOCAL = LayerConfig(window=5, position=PositionConfig(options=RopeConfig(theta=500.0)))
LLAMA = {"model.norm": "rmsnorm", "model.mlp": "swiglu", "model.kv_heads": 2}
GEMMA = {"model.mlp": "geglu", "model.norm_placement": "sandwich", "model.qk_norm": True,
         "model.scale_embedding": True, "model.norm_zero_centred": True,
         "model.attention_scale_dim": 12.0, "model.logit_softcap": 3.0}  # fmt: skip
# Cohere 2: a parallel block, LayerNorm without bias, scaled logits, sliding-window RoPE layers
# and full NoPE layers
COHERE = {"model.block": "parallel", "model.norm": "layernorm_no_bias", "model.norm_eps": 0.1,
          "model.logit_scale": 0.5, "model.tie_embeddings": True,
          "model.layers": (LayerConfig(window=5), LayerConfig(position=NOPE))}  # fmt: skip


def _trial_dir(tmp_path, kind="rope", **changes):
    """A trial folder holding a random-weight model of the trial (as a train stage leaves it)."""
    cfg = validate(replace(tiny_trial(kind, width=32, head_dim=8, depth=2, vocab=40), **changes))
    model = make_model(cfg)
    params, static = eqx.partition(model, trainable(model))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    leaves = [
        0.4 * jax.random.normal(k, x.shape) + (x.ndim == 1)
        for k, x in zip(keys, leaves, strict=True)
    ]
    model = eqx.combine(jax.tree.unflatten(tree, leaves), static)
    folder = tmp_path / "trials" / cfg.trial_id
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    save_model(folder / MODEL_FILE, model)
    return folder, model


EXPORTS = [
    ({"model.tie_embeddings": True}, "llama"),
    ({"model.position.rope.scaling": "yarn", "model.position.rope.factor": 4.0}, "llama"),
    ({"model.position.rope.scaling": "dynamic", "model.position.rope.factor": 2.0}, "llama"),
    (
        {
            "model.position.rope.scaling": "ntk_by_parts",
            "model.position.rope.factor": 4.0,
            "model.position.rope.params": (("beta_fast", 8.0),),
        },
        "llama",
    ),
    ({"model.qkv_bias": True}, "qwen2"),
    ({"model.qk_norm": True, "model.heads": 2, "model.head_dim": 24}, "qwen3"),
    ({"model.layers": (LayerConfig(window=5),)}, "mistral"),
    ({"model.layers": (LayerConfig(), LayerConfig(position=NOPE))}, "smollm3"),
    (OLMO, "olmo2"),
    ({**OLMO, "model.layers": (LOCAL, LayerConfig())}, "olmo3"),
    ({**GEMMA, "model.tie_embeddings": True}, "gemma3_text"),
    ({**GEMMA, "model.layers": (LOCAL, LayerConfig())}, "gemma3_text"),
]


# Llama (the first export pays for importing transformers) and Cohere 2 by default, every
# other family -m slow: each family loads its own transformers model
@pytest.mark.parametrize(
    ("changes", "model_type"),
    [
        EXPORTS[0],
        *(pytest.param(*case, marks=pytest.mark.slow) for case in EXPORTS[1:]),
        (COHERE, "cohere2"),
    ],
)
def test_export_loads_in_transformers_and_round_trips(tmp_path, changes, model_type):
    _, transformers = transformers_or_skip()
    trial_dir, model = _trial_dir(tmp_path, **{**LLAMA, **changes})
    out = tmp_path / "hf"
    assert main([ "export", str(trial_dir), "--hf", str(out)]) == 0  # fmt: skip
    written = json.loads((out / "config.json").read_text())
    assert written["model_type"] == model_type
    if model_type == "smollm3":
        assert written["no_rope_layers"] == [1, 0]
    if model_type == "gemma3_text":
        assert (written["query_pre_attn_scalar"], written["final_logit_softcapping"]) == (12, 3.0)
        assert "hidden_act" not in written
    if model_type == "cohere2":
        assert (written["logit_scale"], written["layer_norm_eps"]) == (0.5, 0.1)
        assert written["layer_types"] == ["sliding_attention", "full_attention"]
    if "model.layers" in changes and model_type in ("olmo3", "gemma3_text"):
        assert written["layer_types"] == ["sliding_attention", "full_attention"]
        assert written["rope_parameters"]["sliding_attention"]["rope_theta"] == 500.0
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()

    class Ckpt:  # what hf_logits reads
        pass

    ckpt = Ckpt()
    ckpt.hf = hf
    back = from_hf(out)
    rng = np.random.default_rng(0)
    for length in (12, 48):  # below and beyond the trained 16
        tokens = rng.integers(0, 40, (2, length))
        ours = np.asarray(at_length(model, length)(jnp.asarray(tokens)))
        want = hf_logits(ckpt, tokens)
        assert np.abs(ours - want).max() / np.abs(want).max() < 1e-4, length
        np.testing.assert_allclose(
            at_length(back, length)(jnp.asarray(tokens)), ours, rtol=1e-6, atol=1e-6
        )


def test_ntk_by_parts_exports_as_yarn_with_attention_factor_one(tmp_path):
    """transformers 5.24.0's yarn takes an explicit attention_factor as is, so YaRN's
    frequencies without its attention factor are rope_type yarn with attention_factor 1.0;
    from_hf reads that back as rope_lab's yarn with attention_factor 1.0 (the same model)."""
    changes = {"model.position.rope.scaling": "ntk_by_parts", "model.position.rope.factor": 4.0}
    trial_dir, model = _trial_dir(tmp_path, **{**LLAMA, **changes})
    out = tmp_path / "hf"
    assert main(["export", str(trial_dir), "--hf", str(out)]) == 0
    rope = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert rope == {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                    "original_max_position_embeddings": 16, "attention_factor": 1.0}  # fmt: skip
    back = from_hf(out).config.position.options
    assert (back.scaling, back.factor, dict(back.params)) == (
        "yarn",
        4.0,
        {"attention_factor": 1.0},
    )
    ours = model.position
    theirs = from_hf(out).position
    np.testing.assert_array_equal(theirs.inv_freq.get(), ours.inv_freq.get())
    assert float(theirs.attention_factor.get()) == float(ours.attention_factor.get()) == 1.0


def test_load_model_reads_a_trial_folder(tmp_path):
    trial_dir, model = _trial_dir(tmp_path, **LLAMA)
    tokens = jnp.arange(10) % 40
    np.testing.assert_array_equal(load_model(trial_dir)(tokens), model(tokens))


@pytest.mark.parametrize(
    ("kind", "changes", "match"),
    [
        ("alibi", LLAMA, r"model.position.kind: 'alibi' has no Hugging Face"),
        ("rope", {**LLAMA, "model.norm": "layernorm"}, r"model.norm: 'layernorm'"),
        ("rope", {**LLAMA, "model.position.rope.rotary_fraction": 0.5}, r"rotary_fraction"),
        ("rope", {**LLAMA, "model.parametrization": "mup"}, r"model.parametrization: 'mup'"),
        (
            "rope",
            {
                **LLAMA,
                "model.position.rope.scaling": "dynamic_yarn",
                "model.position.rope.factor": 4.0,
            },
            r"model.position.rope.scaling: 'dynamic_yarn' has no Hugging Face rope_type "
            r"\(transformers' 'yarn' is static",
        ),
        (
            "rope",
            {**LLAMA, "model.position.rope.scaling": "ntk", "model.position.rope.factor": 4.0},
            r"model.position.rope.scaling: 'ntk' has no Hugging Face rope_type \(static NTK-aware",
        ),
        (
            "rope",
            {**LLAMA, "model.norm_placement": "post"},
            r"model.norm_placement / model.qk_norm_scope: only post with QK-norm over the "
            r"projection exports \(OLMo 2 / 3\); got 'post', qk_norm False, 'head'",
        ),
        (
            "rope",
            {**LLAMA, **OLMO, "model.layers": (LOCAL, LayerConfig(window=7))},
            r"model.layers: OLMo 3 exports full layers and sliding-window layers of one window",
        ),
        (
            "rope",
            {**LLAMA, "model.scale_embedding": True},
            r"model.scale_embedding: True exports as Gemma 3 only \(with "
            r"model.norm_placement: sandwich\)",
        ),
        (
            "rope",
            {**LLAMA, "model.mlp": "geglu"},
            r"model.mlp: 'geglu' has no Hugging Face Llama-family form",
        ),
        (
            "rope",
            {**LLAMA, **GEMMA, "model.norm_zero_centred": False},
            r"model.norm_zero_centred: Gemma 3 \(model.norm_placement: sandwich\) needs True, "
            r"got False",
        ),
        (
            "rope",
            {**LLAMA, **COHERE, "model.norm": "rmsnorm"},
            r"model.norm: Cohere 2 \(model.block: parallel\) needs 'layernorm_no_bias', got "
            r"'rmsnorm'",
        ),
        (
            "rope",
            {**LLAMA, **COHERE, "model.layers": ()},
            r"model.layers: Cohere 2 \(model.block: parallel\) exports sliding-window layers of "
            r"one window with the model's RoPE and full NoPE layers",
        ),
        (
            "rope",
            {**LLAMA, "model.logit_scale": 0.5},
            r"model.logit_scale: 0.5 exports as Cohere 2 only \(with model.block: parallel\)",
        ),
        (
            "rope",
            {**LLAMA, "model.norm": "layernorm_no_bias"},
            r"model.norm: 'layernorm_no_bias' has no Hugging Face Llama-family form \(export "
            r"needs 'rmsnorm'; Cohere 2, model.block: parallel, 'layernorm_no_bias'\)",
        ),
        (
            "rope",
            {**LLAMA, "model.position.rope.scaling": "proportional"},
            r"model.position.rope.scaling: 'proportional' is not exported",
        ),
    ],
)
def test_export_refuses_what_hugging_face_cannot_express(tmp_path, kind, changes, match, capsys):
    trial_dir, _ = _trial_dir(tmp_path, kind, **changes)
    with pytest.raises(CheckpointError, match=match):
        from rope_lab.hf.weights import save_hf

        save_hf(load_model(trial_dir), tmp_path / "hf", vocab_size=40)
    assert main(["export", str(trial_dir), "--hf", str(tmp_path / "hf")]) == 1
    assert re.search(match, capsys.readouterr().err)
    assert not (tmp_path / "hf").exists()

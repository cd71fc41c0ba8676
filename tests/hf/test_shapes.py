"""A checkpoint's tensors are held to its config.json: any single shape field changed is refused
naming that key (a law over every family), and each kind of disagreement (a shape, missing
layers or tensors, tensors with no place, a tied head that is not the embedding) is one line
naming the file, the key(s) with their values and the tensor with its shape, both when the
weights load (`from_hf`) and when a trial from the checkpoint is validated (headers only)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from rope_lab.cli import main
from rope_lab.config import ConfigError, from_dict, validate
from rope_lab.hf import CheckpointError, read_config
from rope_lab.hf.config import from_hf_dict
from rope_lab.hf.shapes import check_tensors
from rope_lab.hf.weights import _read_tensors, from_hf
from rope_lab.typed import to_dict
from tests.helpers import tiny_trial

SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size", "num_hidden_layers", "tie_word_embeddings")  # fmt: skip
LAW_FAMILIES = ("llama", "smollm2", "qwen2", "qwen3", "phi3")


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _refusal_on_load(folder: Path, cfg: dict) -> str | None:
    """The message of the CheckpointError that loading `folder`'s tensors under `cfg` gives
    (the checks `from_hf` runs before it builds anything), or None."""
    try:
        arch = from_hf_dict(cfg, where="ckpt/config.json")
        check_tensors(arch, _read_tensors(folder, arch))
    except CheckpointError as err:
        return str(err)
    return None


@pytest.fixture(scope="module")
def law_checkpoints(checkpoints):
    return {family: checkpoints(family).folder for family in LAW_FAMILIES}


def test_every_unchanged_family_passes_the_checks(law_checkpoints):
    for family, folder in law_checkpoints.items():
        assert _refusal_on_load(folder, _config(folder)) is None, family


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_any_single_changed_shape_field_is_refused_naming_it(law_checkpoints, data):
    family = data.draw(st.sampled_from(LAW_FAMILIES))
    key = data.draw(st.sampled_from(SHAPE_KEYS))
    folder = law_checkpoints[family]
    cfg = _config(folder)
    arch = read_config(folder).model
    now = {"head_dim": arch.d_head, "num_key_value_heads": arch.n_kv_heads}.get(key, cfg.get(key))
    if key == "tie_word_embeddings":
        value = not now
    else:
        value = data.draw(st.integers(-1, 300).filter(lambda v: v != now))
    message = _refusal_on_load(folder, {**cfg, key: value})
    assert message is not None, (family, key, value)
    assert message.startswith(("ckpt/config.json: ", "ckpt: ")), message
    assert key in message and "\n" not in message, message


def _variant(tmp_path: Path, source: Path, change=None, drop=(), edit=None) -> Path:
    """A copy of the checkpoint `source` with config.json changed and its tensors edited
    (`edit(dict of arrays)`)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(source, folder)
    cfg = {k: v for k, v in {**_config(source), **(change or {})}.items() if k not in drop}
    (folder / "config.json").write_text(json.dumps(cfg))
    if edit is not None:
        (file,) = folder.glob("*.safetensors")
        arrays = load_file(file)
        edit(arrays)
        save_file(arrays, str(file), metadata={"format": "pt"})
    return folder


def _add_extra(arrays):
    arrays["model.extra.weight"] = arrays["model.norm.weight"]


def _drop_layer_one(arrays):
    for name in [n for n in arrays if n.startswith("model.layers.1.")]:
        del arrays[name]


def _two_dim_norm(arrays):
    arrays["model.norm.weight"] = arrays["model.norm.weight"][:, None]


QKV = "model.layers.0.self_attn.{}_proj.weight"
BIASES = ", ".join(f"model.layers.{i}.self_attn.{n}_proj.bias" for i in (0, 1) for n in "kqv")
PHI3_HEAD = "head_dim 16 (hidden_size 64 / num_attention_heads 4)"
CASES = {
    "width": ("llama", {"hidden_size": 48}, (), None,
              "C: hidden_size 48 disagrees with model.embed_tokens.weight of shape (96, 32)"),
    "mlp": ("llama", {"intermediate_size": 64}, (), None,
            "C: intermediate_size 64 disagrees with model.layers.0.mlp.gate_proj.weight of "
            "shape (56, 32)"),
    "heads-do-not-divide": ("llama", {"num_attention_heads": 5}, ("head_dim",), None,
                            "C: num_attention_heads 5 does not divide hidden_size 32 (and "
                            "head_dim is not set)"),
    "heads": ("llama", {"num_attention_heads": 8}, (), None,
              f"C: num_attention_heads 8 x head_dim 8 = 64 disagrees with {QKV.format('q')} "
              "of shape (32, 32)"),
    "kv-do-not-divide": ("llama", {"num_key_value_heads": 3}, (), None,
                         "C: num_key_value_heads 3 does not divide num_attention_heads 4"),
    "kv-derived": ("llama", {}, ("head_dim", "num_key_value_heads"), None,
                   "C: num_key_value_heads 4 (num_attention_heads) x head_dim 8 (hidden_size 32 "
                   f"/ num_attention_heads 4) = 32 disagrees with {QKV.format('k')} of shape "
                   "(16, 32)"),
    "vocab": ("llama", {"vocab_size": 100}, (), None,
              "C: vocab_size 100 disagrees with model.embed_tokens.weight of shape (96, 32)"),
    "more-layers": ("llama", {"num_hidden_layers": 3}, (), None,
                    "C: num_hidden_layers 3 disagrees with the tensors, which hold layers 0-1 "
                    "(model.layers.N.*)"),
    "missing-layer": ("llama", {}, (), _drop_layer_one,
                      "C: num_hidden_layers 2 disagrees with the tensors, which hold layers 0 "
                      "(model.layers.N.*)"),
    "tied-head-differs": ("llama", {"tie_word_embeddings": True}, (), None,
                          "C: tie_word_embeddings true, but lm_head.weight is not "
                          "model.embed_tokens.weight"),
    "untied-without-head": ("smollm2", {"tie_word_embeddings": False}, (), None,
                            "F: no tensor lm_head.weight in its *.safetensors "
                            "(tie_word_embeddings is false)"),
    "missing-tensor": ("llama", {}, (), lambda a: a.pop(QKV.format("k").replace(".0.", ".1.")),
                       "F: no tensor model.layers.1.self_attn.k_proj.weight in its "
                       "*.safetensors"),
    "biases-expected": ("llama", {"model_type": "qwen2"}, (), None,
                        "F: no tensor model.layers.0.self_attn.q_proj.bias in its *.safetensors "
                        "(model_type 'qwen2' has q/k/v biases)"),
    "biases-unplaced": ("qwen2", {"model_type": "llama"}, (), None,
                        f"F: tensors the config has no place for: {BIASES} (model_type 'llama' "
                        "has no q/k/v biases)"),
    "extra-tensor": ("llama", {}, (), _add_extra,
                     "F: tensors the config has no place for: model.extra.weight"),
    "ndim": ("llama", {}, (), _two_dim_norm,
             "C: model.norm.weight has shape (32, 1), expected 1 dimension(s) (hidden_size 32)"),
    "qwen3-head-dim": ("qwen3", {"head_dim": 8}, (), None,
                       f"C: num_attention_heads 4 x head_dim 8 = 32 disagrees with "
                       f"{QKV.format('q')} of shape (64, 32)"),
    "phi3-fused": ("phi3", {"num_key_value_heads": 4}, (), None,
                   f"C: num_attention_heads 4 x {PHI3_HEAD} = 64 + 2 x (num_key_value_heads 4 x "
                   f"{PHI3_HEAD} = 64) disagrees with model.layers.0.self_attn.qkv_proj.weight "
                   "of shape (128, 64)"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_disagreement_is_one_line_naming_file_key_and_tensor(checkpoints, tmp_path, case):
    family, change, drop, edit, message = CASES[case]
    folder = _variant(tmp_path, checkpoints(family).folder, change, drop, edit)
    want = message.replace("C: ", f"{folder / 'config.json'}: ").replace("F: ", f"{folder}: ")
    with pytest.raises(CheckpointError) as err:
        from_hf(folder)
    assert str(err.value) == want


def test_stored_rotary_frequencies_are_skipped_as_transformers_skips_them(checkpoints, tmp_path):
    """Older checkpoints stored each layer's `rotary_emb.inv_freq`, which the config decides:
    the model loads as without them (any other unplaced tensor is refused, above)."""
    source = checkpoints("llama").folder

    def add_frequencies(arrays):
        for i in (0, 1):
            arrays[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = np.ones(4, np.float32)

    folder = _variant(tmp_path, source, edit=add_frequencies)
    with_them, without = from_hf(folder), from_hf(source)
    leaves = lambda m: jax.tree.leaves(eqx.filter(m, eqx.is_array))
    for a, b in zip(leaves(with_them), leaves(without), strict=True):
        np.testing.assert_array_equal(a, b)


def _trial_yaml(folder: Path) -> Path:
    data = to_dict(tiny_trial("rope"))
    data["model"] = {"init": {"hf": str(folder)}}
    data["train"] = {k: v for k, v in data["train"].items() if k not in ("length", "steps")}
    data["task"].pop("vocab_size")
    path = folder.parent / "trial.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_trial_from_a_disagreeing_checkpoint_is_refused_before_it_runs(
    checkpoints, tmp_path, capsys
):
    """Validation reads the safetensors headers: `rope-lab train` prints one line, exit 1,
    where it recorded the trial as width 48 and trained on width-32 tensors."""
    folder = _variant(tmp_path, checkpoints("llama").folder, {"hidden_size": 48})
    want = "hidden_size 48 disagrees with model.embed_tokens.weight of shape (96, 32)"
    data = yaml.safe_load(_trial_yaml(folder).read_text())
    with pytest.raises(ConfigError, match=re.escape(want)):
        validate(from_dict(type(tiny_trial()), data))
    assert main(["train", str(_trial_yaml(folder))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rope-lab: error: ") and err.rstrip().endswith(want)
    assert len(err.strip().splitlines()) == 1
    # Phi-3's fused projections too, from the headers
    phi3 = _variant(tmp_path / "phi3", checkpoints("phi3").folder, {"intermediate_size": 60})
    with pytest.raises(ConfigError, match=r"2 x intermediate_size 60 disagrees with model\.layers"):
        validate(from_dict(type(tiny_trial()), yaml.safe_load(_trial_yaml(phi3).read_text())))

"""Config loading and validation: every bad input names its key."""

import dataclasses

import pytest
import yaml

from rope_lab.config import (
    ConfigError,
    TrialConfig,
    config_hash,
    from_dict,
    load_trial,
    replace,
    to_dict,
    validate,
)
from rope_lab.trial.ids import execution_fields
from tests.helpers import tiny_trial

EXECUTION_FIELDS = execution_fields(TrialConfig)


def test_defaults_are_valid():
    validate(TrialConfig())


def test_example_config_loads():
    cfg = load_trial("examples/rope_passkey.yaml")
    assert cfg.model.position.kind == "rope"
    assert cfg.train.length == 64
    assert cfg.eval_lengths == (16, 32, 64, 96, 128, 256, 512, 1024)


def test_roundtrip_through_dict():
    cfg = tiny_trial(task_params=(("needle_length", 3),))
    again = from_dict(TrialConfig, to_dict(cfg))
    assert again == cfg
    assert hash(again) == hash(cfg)


def test_trial_id_is_stable_and_sensitive():
    a = tiny_trial()
    assert a.trial_id == tiny_trial().trial_id
    assert a.trial_id.startswith("passkey-rope-w32-d1-L16-s0-")
    b = replace(a, **{"model.width": 64})
    assert b.trial_id != a.trial_id
    assert config_hash(replace(a, name="other")) == config_hash(a)
    assert replace(a, **{"ntk.probes": 9}).trial_id != a.trial_id


def test_execution_settings_do_not_change_the_trial_id():
    a = tiny_trial()
    changed = {
        "name": "another_sweep",
        "model.attention": "blocked",
        "train.devices": 2,
        "train.processes": 2,
        "train.shard_params": True,
        "train.remat": "block",
        "eval.pad_to_longest": True,
        "eval.memory_budget_mb": 1.0,
        "ntk.chunk_size": 3,
        "ntk.pad_to_longest": False,
    }
    assert set(changed) == set(EXECUTION_FIELDS)
    assert replace(a, **changed).trial_id == a.trial_id


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"modle": {}}, r"unknown key 'modle' \(did you mean 'model'\?\)"),
        ({"model": {"widht": 3}}, r"model.widht: unknown key .*did you mean 'width'"),
        ({"model": {"width": "big"}}, r"model.width: expected an integer, got 'big'"),
        ({"train": {"length": 1.5}}, r"train.length: expected an integer"),
        ({"model": {"position": {"randomized": "yes"}}}, r"randomized: expected true or false"),
    ],
)
def test_parse_errors_name_the_key(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(TrialConfig, data)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"model.width": 0}, r"model.width: must be > 0, got 0"),
        ({"model.depth": -1}, r"model.depth: must be > 0"),
        ({"model.head_dim": 24}, r"model.head_dim: 24 does not divide model.width=32"),
        ({"model.head_dim": None, "model.heads": 3}, r"model.heads: 3 does not divide"),
        ({"model.head_dim": None}, r"model.heads / model.head_dim: set one of them"),
        ({"model.kv_heads": 3}, r"model.kv_heads: 3 does not divide the 4 query heads"),
        ({"model.norm_eps": 0.0}, r"model.norm_eps: must be > 0"),
        ({"model.qk_norm": True}, r"model.qk_norm: needs model.norm: rmsnorm"),
        (
            {"model.tie_embeddings": True, "model.parametrization": "mup"},
            r"model.tie_embeddings: .* sp only",
        ),
        ({"model.norm": "batchnorm"}, r"model.norm: unknown value 'batchnorm'; allowed: layernorm"),
        ({"model.position.kind": "t5"}, r"model.position.kind: unknown value 't5'; allowed: none"),
        ({"model.parametrization": "x"}, r"model.parametrization: unknown value 'x'; allowed: sp"),
        ({"model.position.rope.scaling": "foo"}, r"model.position.rope: unknown scaling 'foo'"),
        ({"model.position.rope.factor": 0.5}, r"factor"),
        ({"eval.factors": (2.0, 0.5)}, r"eval.factors\[1\]: factor must be >= 1, got 0.5"),
        ({"eval.methods": ("linear", "bogus")}, r"eval.methods\[1\]: unknown scaling 'bogus'"),
        ({"eval.length_multipliers": (0.01, 1.0)}, r"eval.length_multipliers\[0\]: .* below 1"),
        ({"train.length": 0}, r"train.length: must be > 0"),
        ({"train.lr": -1.0}, r"train.lr: must be > 0"),
        ({"task.name": "sorting"}, r"task.name: unknown task 'sorting'; allowed: .*passkey"),
        ({"task.vocab_size": 5}, r"task: .*vocab"),
        (
            {"eval.length_multipliers": (0.25, 1.0)},
            r"eval.length_multipliers: length 4 does not fit",
        ),
        ({"task.params": (("needle_lenght", 2),)}, r"needle_lenght"),
        ({"model.position.randomized": True}, r"random_max_length"),
        ({"model.position.kind": "none", "model.position.randomized": True}, r"randomized"),
        ({"model.position.kind": "learned", "model.position.max_length": 8}, r"max_length: 8"),
        ({"eval.accuracy_threshold": 0.0}, r"eval.accuracy_threshold"),
    ],
)
def test_validation_errors_name_the_key(changes, match):
    with pytest.raises(ConfigError, match=match):
        validate(replace(tiny_trial(), **changes))


def test_llama3_without_band_params_is_rejected():
    cfg = replace(tiny_trial(), **{"eval.methods": ("llama3",), "eval.method_params": ()})
    with pytest.raises(ConfigError, match=r"eval.methods\[0\] \(llama3, factor 2\).*freq_factor"):
        validate(cfg)


def test_load_trial_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"model": {"width": 30, "head_dim": 8}}))
    with pytest.raises(ConfigError, match=r"bad.yaml: model.head_dim: 8 does not divide"):
        load_trial(path)
    path.write_text("model: [1, 2")
    with pytest.raises(ConfigError, match=r"bad.yaml: cannot read YAML"):
        load_trial(path)


def test_width_grows_heads_at_fixed_head_dim():
    cfg = tiny_trial(width=64, head_dim=16)
    assert (cfg.model.n_heads, cfg.model.d_head) == (4, 16)
    explicit = dataclasses.replace(cfg.model, heads=2, head_dim=None)
    assert (explicit.n_heads, explicit.d_head) == (2, 32)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"model": {"position": {"kind": "alibi", "rope": {"theta": 500.0}}}},
            "model.position.rope: not used, because model.position.kind is 'alibi'; remove it",
        ),
        (
            {"model": {"layers": [{"position": {"kind": "none", "xpos": {"gamma": 0.4}}}]}},
            "model.layers[0].position.xpos: not used, because model.layers[0].position.kind "
            "is 'none'; remove it",
        ),
        (
            {"model": {"position": {"kind": "alibi"}}, "eval": {"methods": ["yarn"]}},
            "eval.methods: not used, because there are no RoPE scalings under "
            "model.position.kind 'alibi'; remove it",
        ),
        (
            {"model": {"family": "cnn"}, "eval": {"methods": ["yarn"]}},
            "eval.methods: not used, because there are no RoPE scalings under "
            "model.family 'cnn'; remove it",
        ),
        (
            {"model": {"position": {"kind": "learned"}}, "eval": {"finetune_steps": 10}},
            "eval.finetune_steps: not used, because there are no RoPE scalings under "
            "model.position.kind 'learned'; remove it",
        ),
    ],
)
def test_a_trial_file_setting_its_trial_does_not_use_is_refused(tmp_path, data, message):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_trial(path)
    assert str(err.value) == f"{path}: {message}"
    load_trial(path, saved=True)  # a config rope_lab saved: every field, unused or not


def test_a_trial_file_keeps_what_its_encoding_uses(tmp_path):
    path = tmp_path / "t.yaml"
    for data in (
        {"model": {"position": {"kind": "rope", "rope": {"theta": 500.0}}}},
        {"model": {"position": {"kind": "alibi"}}, "eval": {"methods": []}},
        {"model": {"position": {"kind": "alibi", "rope": {}}}},
        # every field written, the evaluation's at their defaults: a saved config, copied
        to_dict(from_dict(TrialConfig, {"model": {"position": {"kind": "alibi"}}})),
    ):
        path.write_text(yaml.safe_dump(data))
        assert load_trial(path) == from_dict(TrialConfig, data)

"""A trial from a checkpoint (`model.init.hf`): the checkpoint decides the architecture,
vocabulary and training length, nothing trains, and the trial's model is the checkpoint's."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest
import yaml

from rope_lab.config import ConfigError, from_dict, load_trial, replace, validate
from rope_lab.hf import read_config
from rope_lab.hf.weights import from_hf
from rope_lab.model.factory import make_model
from rope_lab.typed import to_dict
from tests.helpers import tiny_trial
from tests.hf.conftest import ORIGINAL, VOCAB


def _trial(folder, **changes):
    data = to_dict(tiny_trial("rope"))
    data["model"] = {"init": {"hf": str(folder)}}
    data["train"] = {k: v for k, v in data["train"].items() if k not in ("length", "steps")}
    data["task"].pop("vocab_size")
    cfg = from_dict(type(tiny_trial()), data)
    return validate(replace(cfg, **changes))


def test_the_checkpoint_decides_architecture_vocabulary_and_length(checkpoints):
    folder = checkpoints("qwen3").folder
    cfg = _trial(folder)
    arch = read_config(folder)
    for name in ("width", "depth", "heads", "head_dim", "kv_heads", "qk_norm", "position"):
        assert getattr(cfg.model, name) == getattr(arch.model, name), name
    assert (cfg.train.length, cfg.train.steps, cfg.task.vocab_size) == (ORIGINAL, 0, VOCAB)
    assert cfg.model.init.hf == str(folder)


@pytest.mark.parametrize("family", ["llama", "smollm3", "olmo3", "gemma3"])
def test_the_trials_model_is_the_checkpoint(checkpoints, family):
    """Layouts (SmolLM3's NoPE layers, OLMo 3's sliding layers with their own rope base),
    OLMo's post-norm block and Gemma 3's sandwich block pass the trial's checks and build the
    checkpoint's model."""
    folder = checkpoints(family).folder
    cfg = _trial(folder)
    ours = jax.tree.leaves(eqx.filter(make_model(cfg), eqx.is_array))
    theirs = jax.tree.leaves(eqx.filter(from_hf(folder), eqx.is_array))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("family", ["mistral", "olmo3", "gemma3"])
def test_the_written_config_reads_back_to_the_same_trial(checkpoints, tmp_path, family):
    """A finished trial's config.yaml (architecture filled in) is the same trial again, so a
    rerun finds it."""
    cfg = _trial(checkpoints(family).folder)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    assert load_trial(path).trial_id == cfg.trial_id


def test_fields_that_disagree_with_the_checkpoint_are_refused(checkpoints, tmp_path):
    folder = checkpoints("llama").folder
    with pytest.raises(ConfigError, match=r"model.width: the checkpoint .* sets 32; got 48"):
        _trial(folder, **{"model.width": 48})
    with pytest.raises(ConfigError, match=r"train.length: the checkpoint .* sets 16; got 24"):
        _trial(folder, **{"train.length": 24})
    with pytest.raises(ConfigError, match=r"train.steps: a trial from a checkpoint"):
        _trial(folder, **{"train.steps": 5})
    with pytest.raises(ConfigError, match=r"missing-ckpt: no such local folder"):
        _trial(tmp_path / "missing-ckpt")

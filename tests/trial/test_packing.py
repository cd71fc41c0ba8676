"""Packed seeds, on paper: which trials of a sweep train together (`rope_lab.trial.packing`), the
spec key `pack_seeds`, and what `sweep plan` shows of it. No training here."""

import numpy as np
import pytest

from rope_lab.config import ConfigError, TrialConfig, replace
from rope_lab.sweep.plan_table import plan_table
from rope_lab.sweep.spec import parse_spec
from rope_lab.trial.packing import ALONE, OFF, mismatch, pack_key, plan_packs, unpackable
from tests.helpers import tiny_trial

BASE = {
    "model": {"width": 32, "depth": 1, "head_dim": 8},
    "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
    "train": {"length": 16, "batch_size": 4, "steps": 10, "warmup_steps": 2, "log_every": 5},
    "eval": {"length_multipliers": [1], "batches": 1, "batch_size": 4},
    "ntk": {"enabled": False},
}


def _spec(**top):
    return parse_spec({"name": "packs", "base": BASE, **top})


def _seeds(cfg: TrialConfig, *seeds: int) -> list[TrialConfig]:
    return [replace(cfg, **{"train.seed": s}) for s in seeds]


def test_trials_differing_only_in_seeds_pack_in_trial_order():
    spec = _spec(
        pack_seeds=True,
        grid={"model.position.kind": ["rope", "alibi"], "train.seed": [0, 1, 2]},
    )
    packs = plan_packs(spec.trials)
    assert [p.packed for p in packs] == [True, True]
    assert [p.seeds for p in packs] == [[0, 1, 2], [0, 1, 2]]
    assert [{t.model.position.kind for t in p.trials} for p in packs] == [{"rope"}, {"alibi"}]
    # the NTK probes' seed is a seed too; the eval section is not compared (stages run per trial)
    rope = spec.trials[0]
    other = replace(rope, **{"train.seed": 7, "ntk.seed": 9, "eval.batches": 3})
    assert pack_key(other) == pack_key(rope) and mismatch([rope, other]) is None


def test_a_trial_differing_beyond_its_seed_trains_alone_and_mismatch_names_the_key():
    a, b = _seeds(tiny_trial("rope"), 0, 1)
    wider = replace(b, **{"train.lr": 1e-2})
    packs = plan_packs([a, wider])
    assert [(p.packed, p.reason) for p in packs] == [(False, ALONE), (False, ALONE)]
    assert pack_key(a) != pack_key(wider)
    assert "differs from" in mismatch([a, wider]) and "train.lr" in mismatch([a, wider])
    assert mismatch([a, b]) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"train.regime": "lazy"}, "train.regime lazy"),
        ({"train.devices": 2}, "train.devices 2"),
        ({"train.shard_params": True}, "train.shard_params"),
    ],
)
def test_what_cannot_pack_trains_alone_with_its_reason(changes, reason):
    trials = [replace(t, **changes) for t in _seeds(tiny_trial("rope"), 0, 1)]
    assert reason in unpackable(trials[0])
    packs = plan_packs(trials)
    assert [p.packed for p in packs] == [False, False]
    assert all(reason in p.reason for p in packs)
    assert reason in mismatch(trials)
    assert unpackable(tiny_trial("rope")) is None


def test_a_host_fed_task_packs_and_sweep_plan_shows_its_packs(tmp_path):
    """`lm_tokens` (each member's windows read on the host) packs like a device-fed task."""
    from rope_lab.corpus.prepare import write_ids

    corpus = write_ids(tmp_path / "c", np.arange(200) % 256, np.arange(50))
    task = {"name": "lm_tokens", "vocab_size": 256, "params": {"path": str(corpus)}}
    spec = parse_spec(
        {
            "name": "packs",
            "base": {**BASE, "task": task},
            "pack_seeds": True,
            "grid": {"model.position.kind": ["rope", "alibi"], "train.seed": [0, 1]},
        }
    )
    assert all(unpackable(t) is None for t in spec.trials)
    # over several devices it still trains alone (a pack feeds one device)
    assert unpackable(replace(spec.trials[0], **{"train.devices": 2})) == (
        "train.devices 2 (a pack trains on one device)"
    )
    packs = plan_packs(spec.trials)
    assert [(p.packed, p.seeds) for p in packs] == [(True, [0, 1]), (True, [0, 1])]
    assert mismatch(list(packs[0].trials)) is None
    text = plan_table(spec)
    assert "packed seeds: 4 trials train in 2 packs" in text and "alone: " not in text
    col = text.splitlines()[1].split().index("pack")
    cells = [row.split()[col] for row in text.splitlines()[3:7]]
    assert sorted(cells) == ["p1", "p1", "p2", "p2"]


def test_packing_off_leaves_every_trial_alone():
    trials = _seeds(tiny_trial("rope"), 0, 1, 2)
    assert [(len(p.trials), p.reason) for p in plan_packs(trials, enabled=False)] == [(1, OFF)] * 3


@pytest.mark.parametrize("value", ["yes", 1, None, [True]])
def test_pack_seeds_must_be_a_boolean_naming_the_key(value):
    with pytest.raises(
        ConfigError, match=r"^sweep spec: pack_seeds: (expected true or false|must not be null)"
    ):
        _spec(pack_seeds=value)


def test_pack_seeds_defaults_off_and_is_read():
    assert _spec().pack_seeds is False
    assert _spec(pack_seeds=True).pack_seeds is True


def test_sweep_plan_shows_the_packs():
    spec = _spec(
        pack_seeds=True,
        grid={"model.position.kind": ["rope", "alibi"], "train.seed": [0, 1]},
        zip=[{"train.lr": [1e-3, 2e-3]}],
    )  # 8 trials: (kind, lr) picks a pack, the seeds fill it
    text = plan_table(spec)
    lines = text.splitlines()
    header = lines[1].split()
    assert "pack" in header
    col = header.index("pack")
    cells = {row.split()[0]: row.split()[col] for row in lines[3:11]}
    assert sorted(cells.values()) == ["p1", "p1", "p2", "p2", "p3", "p3", "p4", "p4"]
    for pack in plan_packs(spec.trials):
        ids = [t.trial_id for t in pack.trials]
        assert len({cells[i] for i in ids}) == 1  # members share a label
    assert "packed seeds: 8 trials train in 4 packs" in text
    p1 = next(line for line in lines if line.strip().startswith("p1:"))
    assert p1.strip().startswith("p1: seeds 0, 1: ")
    assert "alone" not in text.split("packed seeds")[1].split("\n", 1)[1]

    lone = _spec(pack_seeds=True, grid={"model.position.kind": ["rope", "alibi"]})
    text = plan_table(lone)
    assert "packed seeds: 0 trials train in 0 packs" in text
    assert text.count("alone: ") == 2 and ALONE in text
    assert "pack" not in plan_table(_spec(grid={"train.seed": [0, 1]})).splitlines()[1].split()

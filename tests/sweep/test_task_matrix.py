"""Every task with a relative and an absolute encoding, through the sweep runner, NTK on."""

import polars as pl
import pytest

from rope_lab.registry import TASKS
from rope_lab.results import load
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from tests.sweep.conftest import write_spec
from tests.tasks.common import task_module

# One vocabulary for every task: the models then have the same shapes, so the NTK gradient and
# padded forward programs compile once for all tasks. Each task's parameters are the small ones
# of its own test module (`tiny_params`).
VOCAB = 256


@pytest.mark.parametrize(
    "pad", [pytest.param(False, marks=pytest.mark.slow), True], ids=["unpadded", "padded"]
)
@pytest.mark.slow  # 17-39 s a task on 2 cores; every task's sweep runs in the slow suite
@pytest.mark.parametrize("task", TASKS.names())
def test_every_task_runs_through_the_sweep_with_ntk_tracking(task, pad, tmp_path):
    """A fresh corpus file per run, so no device copy is cached before the sweep's first draw."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(32, 127)) * 40)
    params = task_module(task).tiny_params(str(corpus))
    spec = load_spec(
        write_spec(
            tmp_path,
            base__model={"depth": 1, "head_dim": 8, "width": 16},
            base__task={"name": task, "vocab_size": VOCAB, "params": params},
            base__train={"length": 8, "batch_size": 2, "steps": 2, "warmup_steps": 1},
            base__eval={
                "length_multipliers": [1, 2],
                "batches": 1,
                "batch_size": 2,
                "position_buckets": 1,
                "pad_to_longest": pad,
            },
            base__ntk={
                "enabled": True,
                "probes": 2,
                "probe_multipliers": [2],
                "steps": [0, 2],
                "position_probes": 1,
                "pad_to_longest": pad,
            },
            grid={"model.position.kind": ["rope", "learned"]},
            scaling={"methods": ["dynamic"], "factors": [2]},
        )
    )
    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    res = load(tmp_path / "runs" / "tiny")
    trials = res.trials.collect()
    errors = trials.filter(pl.col("status") != "done")["error"].to_list()
    assert summary.count("done") == 2, errors
    ntk = res.ntk.collect()
    for tid in trials["trial_id"]:
        rows = ntk.filter(pl.col("trial_id") == tid)
        assert set(rows["step"]) == {0, 2}
        assert set(rows["probe_length"].drop_nulls()) >= {16}
        assert rows["value"].is_finite().any()
    ev = res.eval.filter(pl.col("position_bucket").is_null()).collect()
    assert sorted(set(ev["length"])) == [8, 16]
    assert ev["loss"].is_finite().all()

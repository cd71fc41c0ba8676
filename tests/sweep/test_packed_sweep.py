"""Packed seeds through a sweep (`pack_seeds: true`): trials differing only in their seeds train
as one vmapped program and write exactly the rows each writes alone (same trial ids, columns and
values to float tolerance), also when the packed run is stopped mid-training or after training
and rerun."""

import copy
import json

import jax
import numpy as np
import polars as pl
import pytest

from rope_lab.corpus.prepare import write_ids
from rope_lab.results import load, trial_dir
from rope_lab.sweep import runner
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec, parse_spec
from rope_lab.trial.checkpoint import TrialCheckpointer
from rope_lab.trial.pipeline import stage_dir
from rope_lab.trial.stage_plan import eval_stages
from rope_lab.trial.trained import load_model
from tests.sweep.conftest import TINY, write_spec

SEEDS = [0, 1, 2]
TIMING = ("tokens_per_s", "wall_time_s", "started_at", "finished_at")
# table -> the columns that identify a row
KEYS = {
    "trials": ["trial_id"],
    "train": ["trial_id", "step"],
    "eval": ["trial_id", "method", "factor", "finetune_steps", "length", "position_bucket"],
    "ntk": ["trial_id", "step", "metric", "probe_length", "group", "method", "factor", "kernel"],
}


def _spec(pack: bool):
    """Three seeds of one RoPE trial with a scaling stage and NTK tracking, 20 steps,
    checkpoints every 10."""
    data = copy.deepcopy(TINY)
    data["base"]["model"]["position"] = {"kind": "rope"}
    data["base"]["ntk"] = {
        "enabled": True,
        "probes": 2,
        "probe_multipliers": [2],
        "position_probes": 1,
        "chunk_size": 4,
    }
    data["grid"] = {"train.seed": SEEDS}
    data["scaling"] = {"methods": ["linear"], "factors": [2]}
    return parse_spec({**data, "pack_seeds": pack})


def _tables(run_dir, names=tuple(KEYS)) -> dict[str, pl.DataFrame]:
    res = load(run_dir)
    out = {}
    for name in names:
        keys = KEYS[name]
        frame = res.table(name).collect()
        frame = frame.drop([c for c in TIMING if c in frame.columns])
        assert frame.select(keys).is_duplicated().sum() == 0, f"{name}: duplicated rows"
        out[name] = frame.sort(keys, nulls_last=True)
    return out


def _assert_same_rows(expected_dir, actual_dir, names=tuple(KEYS)) -> None:
    """Same trials, columns and rows of the tables `names`; numbers to float32 tolerance (NTK
    values to 1e-5 of their metric's largest magnitude, plus 1e-6)."""
    expected, actual = _tables(expected_dir, names), _tables(actual_dir, names)
    for name, want in expected.items():
        got = actual[name]
        assert got.columns == want.columns, name
        assert got.height == want.height > 0, name
        floats = [c for c, t in want.schema.items() if t in (pl.Float32, pl.Float64)]
        rest = [c for c in want.columns if c not in floats]
        assert got.select(rest).equals(want.select(rest)), name
        for col in floats:
            a, b = want[col].to_numpy(), got[col].to_numpy()
            if name == "ntk" and col == "value":
                scale = want.group_by("metric").agg(pl.col("value").abs().max().alias("s"))
                atol = want.join(scale, on="metric", how="left")["s"].to_numpy() * 1e-5
                # + 1e-6: metrics that are float32 rounding around 0 (RoPE's shift invariance)
                np.testing.assert_array_less(np.abs(a - b), atol + 1e-6)
            else:
                np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=f"{name}.{col}")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The reference: the same sweep with every trial trained alone."""
    out = tmp_path_factory.mktemp("unpacked")
    summary = run_sweep(_spec(pack=False), out, runner="serial", progress=False)
    assert summary.count("done") == len(SEEDS)
    return out / "tiny"


def _done(run_dir, trial_id: str) -> dict:
    return json.loads((stage_dir(run_dir, trial_id, "train") / "done.json").read_text())


class Interrupted(BaseException):
    """Stands for the process being stopped: no `except Exception` catches it."""


@pytest.mark.slow
def test_a_packed_sweep_writes_the_rows_of_its_trials_trained_alone(unpacked, tmp_path):
    spec = _spec(pack=True)
    summary = run_sweep(spec, tmp_path, runner="serial", progress=False)
    assert summary.count("done") == len(SEEDS)
    run_dir = tmp_path / "tiny"
    ids = [t.trial_id for t in spec.trials]
    assert ids == [t.trial_id for t in _spec(pack=False).trials]
    for tid in ids:
        done = _done(run_dir, tid)
        assert done["pack"] == ids and done["resumed_from"] == 0 and "pack_reason" not in done
        assert (trial_dir(run_dir, tid) / "checkpoints" / "20").is_dir()
    _assert_same_rows(unpacked, run_dir)
    assert run_sweep(spec, tmp_path, runner="serial", progress=False).skipped == len(SEEDS)


@pytest.mark.slow
def test_a_packed_sweep_stopped_mid_training_resumes_each_member(unpacked, tmp_path, monkeypatch):
    """Stopped while saving the second member's step-20 checkpoint: the first member holds
    step 20, the others step 10 (the second with its step-20 rows already written). The rerun
    finishes the first alone and packs the other two from step 10, and no row is doubled."""
    spec = _spec(pack=True)
    ids = [t.trial_id for t in spec.trials]
    save = TrialCheckpointer.save
    seen: list[int] = []

    def stop_at_second_final_save(self, step, *args, **kwargs):
        if step == 20:
            seen.append(step)
            if len(seen) == 2:
                raise Interrupted
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(TrialCheckpointer, "save", stop_at_second_final_save)
    with pytest.raises(Interrupted):
        run_sweep(spec, tmp_path, runner="serial", progress=False)
    monkeypatch.setattr(TrialCheckpointer, "save", save)
    run_dir = tmp_path / "tiny"
    steps = [
        sorted(int(p.name) for p in (trial_dir(run_dir, t) / "checkpoints").iterdir()) for t in ids
    ]
    assert steps == [[10, 20], [10], [10]]
    assert not (run_dir / "trials" / ids[1] / "trials").exists()  # no trials row yet

    summary = run_sweep(spec, tmp_path, runner="serial", progress=False)
    assert summary.count("done") == len(SEEDS)
    assert [_done(run_dir, t)["resumed_from"] for t in ids] == [20, 10, 10]
    assert "resumed alone from step 20" in _done(run_dir, ids[0])["pack_reason"]
    assert "pack_reason" not in _done(run_dir, ids[1])
    _assert_same_rows(unpacked, run_dir)


@pytest.mark.slow
def test_a_packed_sweep_stopped_after_training_runs_only_the_evaluation(
    unpacked, tmp_path, monkeypatch
):
    spec = _spec(pack=True)
    ids = [t.trial_id for t in spec.trials]
    run_stage = runner.run_stage

    def no_evaluation(config, run_dir, name):
        if name != "train":
            raise Interrupted
        return run_stage(config, run_dir, name)

    monkeypatch.setattr(runner, "run_stage", no_evaluation)
    with pytest.raises(Interrupted):
        run_sweep(spec, tmp_path, runner="serial", progress=False)
    monkeypatch.setattr(runner, "run_stage", run_stage)
    run_dir = tmp_path / "tiny"
    assert all(_done(run_dir, t)["status"] == "done" for t in ids)
    assert load(run_dir).eval.collect().height == 0

    summary = run_sweep(spec, tmp_path, runner="serial", progress=False)
    for tid in ids:
        ran = [r["stage"] for r in summary.stages[tid] if not r.get("cached")]
        assert "train" not in ran and len(ran) == len(eval_stages(spec.trials[0]))
    _assert_same_rows(unpacked, run_dir)


@pytest.mark.parametrize("task", ["passkey", pytest.param("lm_tokens", marks=pytest.mark.slow)])
def test_two_packed_seeds_write_the_rows_they_write_alone(tmp_path, task):
    """The law of the slow tests above at a smaller size: two seeds, 4 steps, no NTK tracking
    or scaling stage; the packed sweep's trials, train and eval rows and saved models are those
    of the seeds trained alone. `lm_tokens` (host-fed: each member's windows read from a
    corpus on the host) on a tiny corpus of random ids."""
    data = copy.deepcopy(TINY)
    data["base"]["model"]["position"] = {"kind": "rope"}
    if task == "lm_tokens":
        rng = np.random.default_rng(0)
        corpus = write_ids(
            tmp_path / "corpus", rng.integers(0, 256, 3000), rng.integers(0, 256, 400)
        )
        data["base"]["task"] = {"name": task, "vocab_size": 256, "params": {"path": str(corpus)}}
    data["base"]["train"].update(steps=4, log_every=2, checkpoint_every=2)
    data["base"]["eval"]["length_multipliers"] = [1]
    data["grid"] = {"train.seed": [0, 1]}
    data["scaling"] = {"methods": []}
    runs = {}
    for pack in (False, True):
        summary = run_sweep(
            parse_spec({**data, "pack_seeds": pack}), tmp_path / str(pack), runner="serial",
            progress=False,
        )  # fmt: skip
        assert summary.count("done") == 2
        runs[pack] = tmp_path / str(pack) / "tiny"
    ids = sorted(summary.statuses)
    assert all(_done(runs[True], t)["pack"] == ids for t in ids)
    assert all("pack" not in _done(runs[False], t) for t in ids)
    _assert_same_rows(runs[False], runs[True], ("trials", "train", "eval"))
    for tid in ids:
        alone, packed = (load_model(trial_dir(runs[p], tid)) for p in (False, True))
        for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(packed), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def _fake_pipeline(monkeypatch, pack_result=None):
    """Record the stage and pack tasks the runner submits, without training."""
    calls: list[tuple] = []

    def stage(config, run_dir, name):
        calls.append(("stage", config["model"]["position"]["kind"], config["train"]["seed"], name))
        return {"status": "done", "stage": name}

    def pack(configs, run_dir):
        calls.append(
            ("pack", [(c["model"]["position"]["kind"], c["train"]["seed"]) for c in configs])
        )
        if pack_result is not None:
            return pack_result
        from rope_lab.config import TrialConfig, from_dict

        ids = [from_dict(TrialConfig, c).trial_id for c in configs]
        done = {"status": "done", "stage": "train", "pack": ids}
        return {"members": {t: {**done, "trial_id": t} for t in ids}}

    def finish(run_dir, cfg, results, sweep):
        finished[cfg.trial_id] = results
        train = next(r for r in results if r["stage"] == "train")
        return "done" if train["status"] == "done" else "failed"

    finished: dict[str, list[dict]] = {}
    monkeypatch.setattr(runner, "run_stage", stage)
    monkeypatch.setattr(runner, "run_pack_train", pack)
    monkeypatch.setattr(runner, "finish_trial", finish)
    return calls, finished


def test_the_runner_trains_each_pack_in_one_task_then_each_members_stages(
    tmp_path, monkeypatch, capsys
):
    spec = load_spec(
        write_spec(
            tmp_path,
            grid={"model.position.kind": ["rope", "alibi"], "train.seed": [0, 1]},
            pack_seeds=True,
        )
    )
    rope0 = next(t for t in spec.trials if t.model.position.kind == "rope" and t.train.seed == 0)
    run_dir = tmp_path / "runs" / "tiny"
    folder = stage_dir(run_dir, rope0.trial_id, "train")
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(json.dumps({"status": "done", "stage": "train"}))
    (folder.parent.parent / "model.eqx").write_bytes(b"")  # a trained trial holds its model
    calls, finished = _fake_pipeline(monkeypatch)
    summary = run_sweep(spec, tmp_path / "runs", progress=True, runner="serial")
    assert set(summary.statuses.values()) == {"done"}
    for t in spec.trials:  # each member's own train result
        if t.model.position.kind == "alibi":
            (train,) = [r for r in finished[t.trial_id] if r["stage"] == "train"]
            assert train["trial_id"] == t.trial_id and len(train["pack"]) == 2
    # rope seed 0 trained before, so rope seed 1 trains alone; the alibi seeds pack
    assert [c for c in calls if c[0] == "pack"] == [("pack", [("alibi", 0), ("alibi", 1)])]
    assert [c[1:3] for c in calls if c[-1] == "train"] == [("rope", 1)]
    evaluated = [c[1:3] for c in calls if c[0] == "stage" and c[-1] != "train"]
    for t in spec.trials:
        assert evaluated.count((t.model.position.kind, t.train.seed)) == len(eval_stages(t))
    err = capsys.readouterr().err
    assert "seeds packed: 2 train stages in 1 task" in err.splitlines()[0]
    for t in spec.trials:
        if t.model.position.kind == "alibi":
            assert f"  {t.trial_id} train: done" in err


def test_a_crashed_pack_task_fails_each_member(tmp_path, monkeypatch):
    spec = load_spec(write_spec(tmp_path, grid={"train.seed": [0, 1]}, pack_seeds=True))
    failed = {"status": "failed", "error": "worker died"}
    calls, finished = _fake_pipeline(monkeypatch, pack_result=failed)
    summary = run_sweep(spec, tmp_path / "runs", progress=False, runner="serial")
    assert summary.count("failed") == 2 and [c[0] for c in calls] == ["pack"]
    for results in finished.values():
        assert [(r["stage"], r["status"], r["error"]) for r in results] == [
            ("train", "failed", "worker died")
        ]

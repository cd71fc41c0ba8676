"""kill -9 of a worker mid-trial and of the driver mid-sweep: every trial still finishes exactly
once, without duplicate rows, and the interrupted trial resumes from its checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from rope_lab.results import is_finished, load, trial_dir
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from tests.sweep.conftest import write_spec

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TRAIN = {
    "length": 16,
    "batch_size": 8,
    "steps": 3000,
    "warmup_steps": 2,
    "log_every": 50,
    "checkpoint_every": 100,
}


def _spec(tmp_path: Path) -> Path:
    return write_spec(
        tmp_path,
        name="killed",
        base__train=TRAIN,
        scaling=None,  # no RoPE trial to scale
        grid={"model.position.kind": ["alibi", "none"]},
    )


def _driver(spec: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rope_lab.cli", "sweep", "run", str(spec), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for_checkpoint(run_dir: Path, timeout: float = 240.0) -> Path:
    """The first trial folder with a checkpoint at step >= 200 that has not finished."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for folder in sorted((run_dir / "trials").glob("*")):
            ckpts = folder / "checkpoints"
            steps = (
                [int(p.name) for p in ckpts.glob("*") if p.name.isdigit()] if ckpts.exists() else []
            )
            if steps and max(steps) >= 200 and not (folder / "stages/train/done.json").exists():
                return folder
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared in time")


def _check_exactly_once(run_dir: Path, spec_path: Path) -> None:
    spec = load_spec(spec_path)
    res = load(run_dir)
    trials = res.trials.collect()
    assert sorted(trials["trial_id"]) == sorted(t.trial_id for t in spec.trials)
    assert set(trials["status"]) == {"done"}
    train = res.train.collect()
    assert train.height == train.unique(["trial_id", "step"]).height  # no duplicate rows
    for t in spec.trials:
        assert is_finished(trial_dir(run_dir, t.trial_id))
        steps = train.filter(pl.col("trial_id") == t.trial_id)["step"].to_list()
        assert sorted(steps) == list(range(50, 3001, 50))
    ev = res.eval.collect()
    assert ev.height == ev.unique(["trial_id", "method", "length", "position_bucket"]).height


def test_driver_killed_mid_sweep_then_rerun(tmp_path):
    spec_path = _spec(tmp_path)
    out = tmp_path / "runs"
    driver = _driver(spec_path, out)
    interrupted = _wait_for_checkpoint(out / "killed")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    time.sleep(3)  # the in-process cluster's workers exit with their raylet
    summary = run_sweep(load_spec(spec_path), out, runner="ray", progress=False)
    assert summary.count("done") + summary.skipped == 2
    _check_exactly_once(out / "killed", spec_path)
    done = json.loads((interrupted / "stages/train/done.json").read_text())
    assert done["resumed_from"] >= 200
    # the resumed trial's numbers equal those of an uninterrupted run of the same trial
    fresh = run_sweep(load_spec(spec_path), tmp_path / "fresh", runner="serial", progress=False)
    assert fresh.count("done") == 2
    cols = ["trial_id", "step", "loss"]
    a = load(out / "killed").train.select(cols).sort(cols[:2]).collect()
    b = load(fresh.run_dir).train.select(cols).sort(cols[:2]).collect()
    assert a.equals(b)


def test_worker_killed_mid_trial_is_retried_and_resumes(tmp_path):
    spec_path = _spec(tmp_path)
    out = tmp_path / "runs"
    driver = _driver(spec_path, out)
    interrupted = _wait_for_checkpoint(out / "killed")
    holder = (interrupted / "stages/train/.lock").read_text().split()
    worker_pid = int(holder[1])
    assert worker_pid != driver.pid
    os.kill(worker_pid, signal.SIGKILL)
    output, _ = driver.communicate(timeout=600)
    assert driver.returncode == 0, output
    _check_exactly_once(out / "killed", spec_path)
    done = json.loads((interrupted / "stages/train/done.json").read_text())
    assert done["resumed_from"] >= 200


def test_ctrl_c_cancels_cleanly_and_leaves_a_resumable_state(tmp_path):
    spec_path = _spec(tmp_path)
    out = tmp_path / "runs"
    driver = _driver(spec_path, out)
    _wait_for_checkpoint(out / "killed")
    driver.send_signal(signal.SIGINT)
    output, _ = driver.communicate(timeout=120)
    assert driver.returncode == 130, output
    assert "interrupted" in output and "Traceback" not in output
    summary = run_sweep(load_spec(spec_path), out, runner="serial", progress=False)
    assert summary.count("done") + summary.skipped == 2
    _check_exactly_once(out / "killed", spec_path)

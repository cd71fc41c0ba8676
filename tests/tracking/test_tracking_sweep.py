"""A tracked sweep end to end (serial runner): TensorBoard and W&B hold the trial's Parquet
rows; a rerun logs nothing twice; a resumed trial continues its runs; a tracker that raises
mid-trial warns and the trial is still written."""

import shutil

import polars as pl
import pytest

from rope_lab.results import load, trial_dir
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from rope_lab.tracking import runs as tracker_runs
from tests.sweep.conftest import write_spec
from tests.tracking.readers import tb_hparams, tb_scalars, wandb_runs


def _spec(tmp_path):
    tracking = {
        "tensorboard": str(tmp_path / "tb"),
        "wandb": "rope-lab-test",
        "wandb_mode": "offline",
    }
    path = write_spec(
        tmp_path, grid=None, tracking=tracking, scaling={"methods": ["linear"], "factors": [2]}
    )
    return load_spec(path)


def _files(tmp_path):
    return sorted(p.name for p in tmp_path.glob("tb/tiny/*/events.*")), sorted(
        p.name for p in tmp_path.glob("runs/tiny/wandb/offline-run-*")
    )


@pytest.mark.slow  # ~25 s: one trial trained twice, wandb's service process
def test_tracked_sweep_matches_the_tables_and_resumes_its_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    spec = _spec(tmp_path)
    (trial,) = spec.trials
    out = tmp_path / "runs"
    assert run_sweep(spec, out, runner="serial", progress=False).count("done") == 1
    run_dir = out / "tiny"
    res = load(run_dir)
    train = res.train.collect().sort("step")
    assert train["step"].to_list() == [5, 10, 15, 20]
    folder = tmp_path / "tb" / "tiny" / trial.trial_id
    scalars = tb_scalars(folder)
    for key in ("loss", "lr", "grad_norm", "tokens_per_s"):
        assert [s for s, _ in scalars[f"train/{key}"]] == [5, 10, 15, 20]
        assert [v for _, v in scalars[f"train/{key}"]] == pytest.approx(
            train[key].to_list(), rel=1e-6
        )
    whole = res.eval.filter(pl.col("position_bucket").is_null()).collect()
    assert whole.height == 4  # as trained and linear x2, at lengths 16 and 32
    for row in whole.iter_rows(named=True):
        for metric in ("loss", "accuracy"):
            tag = f"eval/{row['method']}_x{row['factor']:g}/{metric}/L{row['length']}"
            assert scalars[tag] == [(20, pytest.approx(row[metric], rel=1e-6))]
    assert tb_hparams(folder)["train.length"] == 16
    runs = wandb_runs(run_dir)
    assert {(r["id"], r["group"]) for r in runs} == {(trial.trial_id, "tiny")}
    history = [row for run in runs for row in run["history"]]
    logged = [row for row in history if "train/loss" in row]
    assert [row["_step"] for row in logged] == [5, 10, 15, 20]
    assert [row["train/loss"] for row in logged] == pytest.approx(train["loss"].to_list())
    (evaluated,) = [row for row in history if "eval/linear_x2/loss/L32" in row]
    assert evaluated["_step"] == 20

    before = _files(tmp_path)
    again = run_sweep(spec, out, runner="serial", progress=False)
    assert again.skipped == 1 and _files(tmp_path) == before  # nothing logged twice

    # killed after step 15 with its last checkpoint at 10: the rerun resumes from 10
    trial_folder = trial_dir(run_dir, trial.trial_id)
    (trial_folder / "_SUCCESS").unlink()
    (trial_folder / "stages" / "train" / "done.json").unlink()
    shutil.rmtree(trial_folder / "checkpoints" / "20")
    summary = run_sweep(spec, out, runner="serial", progress=False)
    assert summary.count("done") == 1
    assert summary.stages[trial.trial_id][0]["resumed_from"] == 10
    tb_files, wandb_folders = _files(tmp_path)
    assert len(tb_files) == len(before[0]) + 2 and len(wandb_folders) == len(before[1]) + 2
    scalars = tb_scalars(folder)
    assert [s for s, _ in scalars["train/loss"]] == [5, 10, 15, 20]  # no step twice
    assert [v for _, v in scalars["train/loss"]] == pytest.approx(train["loss"].to_list())
    assert [s for s, _ in scalars["eval/linear_x2/loss/L32"]] == [20]
    runs = wandb_runs(run_dir)
    assert {r["id"] for r in runs} == {trial.trial_id}  # the same run, continued
    resumed = [row["_step"] for row in runs[-2]["history"]]
    assert resumed == [15, 20]  # the resumed process logs from its checkpoint on


@pytest.mark.slow  # ~12 s: one trial
def test_a_tracker_raising_mid_trial_warns_and_the_trial_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    spec = _spec(tmp_path)
    (trial,) = spec.trials
    real = tracker_runs.TensorBoardRun.log

    def log(self, step, scalars):
        if step == 10:
            raise RuntimeError("event file gone")
        real(self, step, scalars)

    monkeypatch.setattr(tracker_runs.TensorBoardRun, "log", log)
    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    assert summary.count("done") == 1
    warning = (
        f"warning: tracking.tensorboard: trial {trial.trial_id}: failed at step 10 "
        "(RuntimeError: event file gone); it logs nothing more for this trial, the Parquet "
        "tables stay the record"
    )
    assert capsys.readouterr().err.splitlines().count(warning) == 1
    trials = load(tmp_path / "runs" / "tiny").trials.collect()
    assert trials["status"].to_list() == ["done"]
    train_steps = load(tmp_path / "runs" / "tiny").train.collect()["step"].sort().to_list()
    assert train_steps == [5, 10, 15, 20]
    logged = tb_scalars(tmp_path / "tb" / "tiny" / trial.trial_id)["train/loss"]
    assert [s for s, _ in logged] == [5]  # dropped from step 10 on; W&B logged on
    history = [row for run in wandb_runs(tmp_path / "runs" / "tiny") for row in run["history"]]
    assert [row["_step"] for row in history if "train/loss" in row] == [5, 10, 15, 20]


@pytest.mark.slow  # ~30 s: two seeds trained as one pack
def test_packed_seeds_log_each_member_to_its_own_run(tmp_path):
    path = write_spec(
        tmp_path,
        grid={"train.seed": [0, 1]},
        scaling=None,
        pack_seeds=True,
        tracking={"tensorboard": str(tmp_path / "tb")},
        base__eval__length_multipliers=[1],
    )
    spec = load_spec(path)
    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    assert summary.count("done") == 2
    assert summary.stages[spec.trials[0].trial_id][0]["pack"] == [t.trial_id for t in spec.trials]
    train = load(tmp_path / "runs" / "tiny").train.collect()
    for trial in spec.trials:
        logged = tb_scalars(tmp_path / "tb" / "tiny" / trial.trial_id)["train/loss"]
        rows = train.filter(pl.col("trial_id") == trial.trial_id).sort("step")
        assert [s for s, _ in logged] == rows["step"].to_list() == [5, 10, 15, 20]
        assert [v for _, v in logged] == pytest.approx(rows["loss"].to_list(), rel=1e-6)

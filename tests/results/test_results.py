"""Tests for rope_lab.results."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

import polars as pl
import pytest

from rope_lab import results as R
from rope_lab.results import (
    EVAL_SCHEMA,
    NTK_SCHEMA,
    TRAIN_SCHEMA,
    TRIALS_SCHEMA,
    TrialLease,
    append_rows,
    config_schema,
    flatten_config,
    is_finished,
    load,
    mark_success,
    read_trial_table,
    trial_dir,
    write_trial_row,
)


class Kind(enum.Enum):
    A = "a"
    B = "b"


@dataclasses.dataclass(frozen=True)
class Rope:
    method: str = "none"
    factor: float = 1.0


@dataclasses.dataclass(frozen=True)
class Model:
    width: int = 64
    depth: int = 2
    rope: Rope = Rope()
    tied: bool = False


@dataclasses.dataclass(frozen=True)
class Cfg:
    seed: int = 0
    lr: float = 1e-3
    name: str = "base"
    use_bias: bool = True
    warmup: int | None = None
    lengths: tuple[int, ...] = (64, 128)
    betas: tuple[float, ...] = (0.9, 0.95)
    mixed: tuple[int, str] = (1, "x")
    params: tuple[tuple[str, float], ...] = (("alpha", 1.0), ("beta", 32.0))
    kind: Kind = Kind.A
    mode: Literal["train", "eval"] = "train"
    model: Model = Model()
    finetune: Rope | None = None


CFG_SCHEMA = config_schema(Cfg)


def _train_rows(trial_id: str, steps: range) -> list[dict]:
    return [
        {
            "trial_id": trial_id,
            "step": s,
            "loss": 1.0 / (s + 1),
            "grad_norm": 1,  # int, cast to float
            "lr": 1e-3,
            "tokens_per_s": 1000.0,
        }
        for s in steps
    ]


def _files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# ---------------------------------------------------------------------------------- config


def test_config_schema_from_type_hints() -> None:
    schema = config_schema(Cfg)
    assert schema == {
        "seed": pl.Int64(),
        "lr": pl.Float64(),
        "name": pl.String(),
        "use_bias": pl.Boolean(),
        "warmup": pl.Int64(),
        "lengths": pl.List(pl.Int64()),
        "betas": pl.List(pl.Float64()),
        "mixed": pl.String(),
        "params": pl.String(),
        "kind": pl.String(),
        "mode": pl.String(),
        "model.width": pl.Int64(),
        "model.depth": pl.Int64(),
        "model.rope.method": pl.String(),
        "model.rope.factor": pl.Float64(),
        "model.tied": pl.Boolean(),
        "finetune.method": pl.String(),
        "finetune.factor": pl.Float64(),
    }
    with pytest.raises(TypeError):
        config_schema(Cfg())  # an instance, not the class


def test_flatten_config_matches_schema() -> None:
    cfg = Cfg(seed=3, model=Model(width=128, rope=Rope("yarn", 4.0)), betas=(1, 0.5))
    flat = flatten_config(cfg)
    assert list(flat) == list(CFG_SCHEMA)
    assert flat["seed"] == 3
    assert flat["warmup"] is None
    assert flat["lengths"] == [64, 128]
    assert flat["betas"] == [1.0, 0.5]
    assert flat["mixed"] == '[1, "x"]'
    assert json.loads(flat["params"]) == [["alpha", 1.0], ["beta", 32.0]]
    assert flat["kind"] == "a"
    assert flat["model.width"] == 128
    assert flat["model.rope.method"] == "yarn"
    assert flat["finetune.method"] is None and flat["finetune.factor"] is None
    with_ft = flatten_config(dataclasses.replace(cfg, finetune=Rope("pi", 2.0)))
    assert with_ft["finetune.factor"] == 2.0
    # The flattened values fit the declared schema.
    df = pl.DataFrame([flat, with_ft], schema=CFG_SCHEMA)
    assert df.schema == pl.Schema(CFG_SCHEMA)


# ----------------------------------------------------------------------------------- writes


def test_append_rows_atomic_and_idempotent(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t0")
    assert td == tmp_path / "trials" / "t0"
    path = append_rows(td, "train", _train_rows("t0", range(5)), segment="seg0")
    assert path == td / "train" / "seg0.parquet"
    assert _files(td / "train") == ["seg0.parquet"]  # no temp files left behind
    # A resumed trial rewrites the same segment: replaced, not duplicated.
    append_rows(td, "train", _train_rows("t0", range(8)), segment="seg0")
    append_rows(td, "train", _train_rows("t0", range(8, 10)), segment="seg1")
    assert _files(td / "train") == ["seg0.parquet", "seg1.parquet"]
    df = R.read_trial_table(td, "train")
    assert df.schema == TRAIN_SCHEMA
    assert sorted(df["step"].to_list()) == list(range(10))


def test_failed_write_keeps_old_segment_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    td = tmp_path / "t0"
    append_rows(td, "train", _train_rows("t0", range(3)), segment="s")

    def broken_write(self, file, *args, **kwargs):
        file.write(b"PAR1 partial")
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", broken_write)
    with pytest.raises(OSError, match="disk full"):
        append_rows(td, "train", _train_rows("t0", range(9)), segment="s")
    monkeypatch.undo()
    assert _files(td / "train") == ["s.parquet"]
    assert R.read_trial_table(td, "train").height == 3


def test_stray_temp_and_hidden_files_ignored(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t0")
    append_rows(td, "train", _train_rows("t0", range(3)), segment="a")
    # Leftovers of a writer killed mid-write: garbage that is not valid Parquet.
    (td / "train" / ".a.parquet.0123abcd.tmp").write_bytes(b"garbage")
    (td / "train" / ".b.parquet").write_bytes(b"garbage")
    (td / "train" / "c.parquet.tmp").write_bytes(b"garbage")
    res = load(tmp_path)
    assert res.train.collect().height == 3
    assert R.read_trial_table(td, "train").height == 3


def test_schema_casting_and_validation(tmp_path: Path) -> None:
    td = tmp_path / "trials" / "t1"
    df = pl.DataFrame(
        {"step": pl.Series([1, 2], dtype=pl.Int32), "loss": pl.Series([1, 2], dtype=pl.Int8)}
    )
    append_rows(td, "train", df, segment="df")  # trial_id defaults to the folder name
    out = R.read_trial_table(td, "train")
    assert out.schema == TRAIN_SCHEMA
    assert out["trial_id"].to_list() == ["t1", "t1"]
    assert out["loss"].to_list() == [1.0, 2.0]
    assert out["lr"].null_count() == 2  # missing column -> nulls

    with pytest.raises(ValueError, match=r"unknown column\(s\) \['bogus'\].*'grad_norm'"):
        append_rows(td, "train", [{"step": 1, "bogus": 2}], segment="x")
    with pytest.raises(ValueError, match="'loss'"):
        append_rows(td, "train", [{"step": 1, "loss": "high"}], segment="x")
    with pytest.raises(ValueError, match="'step'"):
        append_rows(td, "train", [{"step": 1.5}], segment="x")
    with pytest.raises(ValueError, match="'step'"):
        append_rows(td, "train", pl.DataFrame({"step": [1.0, 2.5]}), segment="x")
    append_rows(td, "train", pl.DataFrame({"step": [3.0], "lr": [None]}), segment="float_step")
    assert R.read_trial_table(td, "train")["step"].to_list() == [1, 2, 3]
    (td / "train" / "float_step.parquet").unlink()
    with pytest.raises(ValueError, match="'step' must not be null"):
        append_rows(td, "train", [{"loss": 1.0}], segment="x")
    with pytest.raises(ValueError, match="unknown table"):
        append_rows(td, "metrics", [{"step": 1}], segment="x")
    with pytest.raises(ValueError, match="invalid segment"):
        append_rows(td, "train", [{"step": 1}], segment=".hidden")
    with pytest.raises(ValueError, match="invalid segment"):
        append_rows(td, "train", [{"step": 1}], segment="a/b")
    assert _files(td / "train") == ["df.parquet"]

    # eval: per-position rows carry a bucket, whole-sequence rows a null bucket.
    rows = [
        {
            "step": 10,
            "method": "none",
            "factor": 1,
            "finetune_steps": 0,
            "length": 256,
            "loss": 2.0,
            "perplexity": 7.4,
            "accuracy": 0.5,
            "exact_match": 0.0,
        },
        {
            "step": 10,
            "method": "yarn",
            "factor": 4.0,
            "finetune_steps": 0,
            "length": 256,
            "loss": 2.5,
            "position_bucket": 128,
        },
    ]
    append_rows(td, "eval", rows, segment="step_10")
    ev = R.read_trial_table(td, "eval")
    assert ev.schema == EVAL_SCHEMA
    assert ev["position_bucket"].to_list() == [None, 128]
    append_rows(td, "ntk", [], segment="empty")
    assert R.read_trial_table(td, "ntk").schema == NTK_SCHEMA


def test_write_trial_row(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t0")
    start = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    row = {
        "sweep": "s",
        "status": "done",
        "wall_time_s": 3,
        "n_params": 10,
        "tokens_seen": 99,
        "started_at": start,
        "finished_at": start + dt.timedelta(seconds=3),
    }
    path = write_trial_row(td, row, Cfg())  # the dataclass instance: flattened + typed
    assert path == td / "trials" / "trial.parquet"
    df = R.read_trial_table(td, "trials")
    assert df.height == 1 and df["trial_id"][0] == "t0" and df["error"][0] is None
    assert df["started_at"][0] == start
    assert pl.read_parquet_schema(path)["warmup"] == pl.Int64  # typed though null
    # Rewrite with a failure: still one row.
    write_trial_row(
        td,
        {**row, "status": "failed", "error": "Traceback..."},
        flatten_config(Cfg()),
        config_schema=CFG_SCHEMA,
    )
    df = R.read_trial_table(td, "trials")
    assert df.height == 1 and df["status"][0] == "failed"
    assert _files(td / "trials") == ["trial.parquet"]

    with pytest.raises(ValueError, match="status"):
        write_trial_row(td, {**row, "status": "ok"}, {})
    with pytest.raises(ValueError, match="unknown trial column"):
        write_trial_row(td, {**row, "lossy": 1.0}, {})
    with pytest.raises(ValueError, match="both a trial column"):
        write_trial_row(td, row, {"sweep": "other"})


# ----------------------------------------------------------------------------------- load


def _populate(run: Path, sweep: str, trial_ids: list[str], width: int) -> None:
    for i, tid in enumerate(trial_ids):
        td = trial_dir(run, tid)
        cfg = Cfg(seed=i, model=Model(width=width))
        write_trial_row(td, {"sweep": sweep, "status": "done", "n_params": width}, cfg)
        append_rows(td, "train", _train_rows(tid, range(4)), segment="0")
        append_rows(
            td,
            "eval",
            [{"step": 4, "method": "none", "length": n, "loss": 1.0} for n in (64, 128, 256)],
            segment="final",
        )
        mark_success(td)


def test_load_two_run_dirs(tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    _populate(run_a, "a", ["a0", "a1"], width=64)
    _populate(run_b, "b", ["b0"], width=128)
    res = load([run_a, run_b], config_schema=CFG_SCHEMA)
    trials = res.trials.collect()
    assert trials.height == 3
    assert list(trials.schema.items())[: len(TRIALS_SCHEMA)] == list(TRIALS_SCHEMA.items())
    assert trials.schema["model.width"] == pl.Int64
    assert trials.schema["lengths"] == pl.List(pl.Int64)
    assert res.train.collect().height == 12
    assert res.ntk.collect().schema == NTK_SCHEMA
    assert res.ntk.collect().height == 0

    ev = res.eval_with_config.collect()
    assert ev.height == 9
    assert ev.columns[: len(EVAL_SCHEMA)] == list(EVAL_SCHEMA)
    widths = dict(ev.group_by("trial_id").agg(pl.col("model.width").first()).iter_rows())
    assert widths == {"a0": 64, "a1": 64, "b0": 128}
    assert set(ev["sweep"]) == {"a", "b"}
    # The same run twice: duplicate trial ids make the join refuse.
    with pytest.raises(pl.exceptions.ComputeError):
        load([run_a, run_a]).eval_with_config.collect()


def test_load_empty_and_missing(tmp_path: Path) -> None:
    (tmp_path / "empty" / "trials").mkdir(parents=True)  # a run directory without trials yet
    res = load(tmp_path / "empty", config_schema=CFG_SCHEMA)
    assert res.train.collect().schema == TRAIN_SCHEMA
    assert res.eval.collect().height == 0
    assert res.trials.collect_schema()["model.rope.factor"] == pl.Float64
    assert res.eval_with_config.collect().height == 0
    missing = tmp_path / "nothing_here"
    with pytest.raises(R.RunDirError) as err:
        load(missing)
    assert str(err.value) == f"not a run directory (no such directory): {missing}"


def test_load_a_parent_folder_of_run_dirs(tmp_path: Path) -> None:
    """`sweep run SPEC --out runs` writes runs/NAME; load("runs") loads every run in it."""
    runs = tmp_path / "runs"
    _populate(runs / "b", "b", ["b0"], width=128)
    _populate(runs / "a", "a", ["a0", "a1"], width=64)
    (runs / "a" / "plots").mkdir()
    (runs / "notes.txt").write_text("x")
    (runs / "scratch").mkdir()  # no trials/: not a run, left out
    res = load(runs, config_schema=CFG_SCHEMA)
    assert res.run_dirs == (runs / "a", runs / "b")
    assert sorted(res.trials.collect()["trial_id"]) == ["a0", "a1", "b0"]
    assert res.eval.collect().height == 9
    # a run directory itself is loaded as it is, also next to a parent folder
    assert load([runs / "a"]).run_dirs == (runs / "a",)
    assert R.run_directories([runs / "b", runs]) == (runs / "b", runs / "a", runs / "b")
    assert R.is_run_dir(runs / "a") and not R.is_run_dir(runs)


def test_load_names_what_a_folder_without_runs_holds(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "plots").mkdir(parents=True)
    (folder / "notes.txt").write_text("x")
    (folder / ".hidden").write_text("x")
    with pytest.raises(R.RunDirError) as err:
        load(folder)
    assert str(err.value) == (
        "not a run directory (no trials/ folder) and no run directory inside it: "
        f"{folder} holds notes.txt, plots/"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty holds nothing$"):
        load(tmp_path / "empty")
    with pytest.raises(R.RunDirError, match=r"not a run directory \(a file\)"):
        load(folder / "notes.txt")


def test_old_files_without_new_columns(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "old")
    (td / "eval").mkdir(parents=True)
    (td / "trials").mkdir(parents=True)
    # Written by an older version: no exact_match / position_bucket, narrower ints.
    pl.DataFrame(
        {
            "trial_id": ["old"],
            "step": pl.Series([5], dtype=pl.Int64),
            "method": ["none"],
            "factor": [1.0],
            "finetune_steps": [0],
            "length": [64],
            "loss": [1.0],
            "perplexity": [2.7],
            "accuracy": [0.3],
        }
    ).write_parquet(td / "eval" / "seg.parquet")
    # Older trial row: lacks a declared config column, has an undeclared one.
    pl.DataFrame(
        {"trial_id": ["old"], "sweep": ["s"], "status": ["done"], "seed": [1], "legacy": ["x"]}
    ).write_parquet(td / "trials" / "trial.parquet")
    new = trial_dir(tmp_path, "new")
    write_trial_row(new, {"status": "running"}, Cfg(seed=2))
    append_rows(new, "eval", [{"step": 1, "exact_match": 1.0, "position_bucket": 0}], segment="s")

    res = load(tmp_path, config_schema=CFG_SCHEMA)
    ev = res.eval.sort("trial_id").collect()
    assert ev.schema == EVAL_SCHEMA
    assert ev["exact_match"].to_list() == [1.0, None]
    assert ev["position_bucket"].to_list() == [0, None]
    trials = res.trials.sort("trial_id").collect()
    assert trials["seed"].to_list() == [2, 1]
    assert trials["model.width"].to_list() == [64, None]
    assert trials["legacy"].to_list() == [None, "x"]  # undeclared column still readable
    assert trials.schema["started_at"] == pl.Datetime("us", "UTC")


def test_old_ntk_rows_without_the_kernel_column_read_as_ntk(tmp_path: Path) -> None:
    """NTK rows written before the `kernel` column load with kernel "ntk" (FILLED); new rows
    keep theirs, through `load` and `read_trial_table`."""
    old = trial_dir(tmp_path, "old")
    (old / "ntk").mkdir(parents=True)
    row = {"trial_id": ["old"], "step": [0], "probe_length": [16], "group": ["total"]}
    row |= {"metric": ["k_train_mean"], "value": [1.0], "method": ["none"], "factor": [1.0]}
    pl.DataFrame(row).write_parquet(old / "ntk" / "ntk_00000000.parquet")
    new = trial_dir(tmp_path, "new")
    rows = [{"step": 0, "metric": "k_train_mean", "value": v, "kernel": k}
            for v, k in ((2.0, "ntk"), (3.0, "nngp"))]  # fmt: skip
    append_rows(new, "ntk", rows, segment="ntk_00000000")
    ntk = load(tmp_path).ntk.sort("trial_id", "value").collect()
    assert ntk.schema == NTK_SCHEMA
    assert list(zip(ntk["trial_id"], ntk["kernel"], strict=True)) == [
        ("new", "ntk"),
        ("new", "nngp"),
        ("old", "ntk"),
    ]
    assert read_trial_table(old, "ntk")["kernel"].to_list() == ["ntk"]


# ------------------------------------------------------------------------ markers & leases


def test_mark_success(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t")
    assert not is_finished(td)
    mark_success(td)
    assert is_finished(td)
    assert _files(td) == ["_SUCCESS"]
    mark_success(td)  # idempotent
    assert is_finished(td)


def test_lease_in_process(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t")
    with TrialLease(td) as first:
        assert first.held and first.acquire()
        second = TrialLease(td)
        assert not second.acquire() and not second.held
    assert not first.held
    assert second.acquire()
    second.release()


_HOLDER = """
import sys, time
from rope_lab.results import TrialLease
lease = TrialLease(sys.argv[1])
print("acquired" if lease.acquire() else "busy", flush=True)
time.sleep(60)
"""


def _spawn_holder(path: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_lease_exclusive_across_processes_and_released_on_kill(tmp_path: Path) -> None:
    td = trial_dir(tmp_path, "t")
    proc, state = _spawn_holder(td)
    try:
        assert state == "acquired"
        lease = TrialLease(td)
        assert not lease.acquire()
        other, other_state = _spawn_holder(td)  # a second driver process is refused too
        other.kill()
        other.wait()
        assert other_state == "busy"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert lease.acquire()  # the kernel dropped the dead holder's lock
        lease.release()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_trial_config_params_are_json_columns_and_round_trip(tmp_path: Path) -> None:
    """`Params` mappings (empty or not) are JSON strings in the trials table, and a real trial
    config's row round-trips with the columns of `config_schema(TrialConfig)`."""
    from rope_lab.config import TrialConfig, replace

    cfg = replace(TrialConfig(), **{"model.position.rope.params": (("beta_fast", 16.0),)})
    flat = flatten_config(TrialConfig())
    assert flat["model.position.rope.params"] == "[]"
    assert flatten_config(cfg)["model.position.rope.params"] == '[["beta_fast", 16.0]]'
    td = trial_dir(tmp_path, "t1")
    write_trial_row(td, {"status": "done"}, cfg)
    df = R.read_trial_table(td, "trials")
    assert df["model.position.rope.params"][0] == '[["beta_fast", 16.0]]'
    assert df["model.position.rope.theta"][0] == 10000.0
    schema = R.config_schema(TrialConfig)
    assert schema["model.position.rope.params"] == pl.String
    assert schema["task.params"] == pl.String

"""A damaged file of a finished trial: the readers name it in one line, `sweep status` says the
trial is not finished, and a rerun recomputes only the stage that wrote it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from rope_lab.cli import main
from rope_lab.results import load
from rope_lab.runtime.checked_files import CorruptFile
from rope_lab.sweep.report import status_table
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from rope_lab.trial.pipeline import StageRecomputed
from tests.sweep.conftest import write_spec

# one trial, two stages: train (10 steps, checkpoints at 5 and 10), then eval as trained
ONE_TRIAL = {
    "grid": {"model.position.kind": ["rope"]},
    "scaling": None,
    "base__eval__methods": [],
    "base__train__steps": 10,
    "base__train__checkpoint_every": 5,
    "base__eval__length_multipliers": [1],
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """(the spec, a finished run of its one trial)."""
    folder = tmp_path_factory.mktemp("corrupt")
    spec = write_spec(folder, **ONE_TRIAL)
    summary = run_sweep(load_spec(spec), folder / "runs", runner="serial", progress=False)
    assert summary.count("done") == 1
    return spec, summary.run_dir


def _copy(finished: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """(spec, out folder, trial folder) of a fresh copy of the finished run."""
    spec, run = finished
    out = tmp_path / "runs"
    shutil.copytree(run, out / run.name)
    (trial,) = (out / run.name / "trials").iterdir()
    return spec, out, trial


def _stage_times(trial: Path) -> dict[str, float]:
    return {p.parent.name: p.stat().st_mtime_ns for p in trial.glob("stages/*/done.json")}


def _eval_rows(run: Path) -> pl.DataFrame:
    return load(run).eval.drop("trial_id").sort(["method", "length", "position_bucket"]).collect()


def test_a_truncated_eval_segment_is_named_and_its_stage_alone_recomputed(
    finished, tmp_path, capsys
):
    spec, out, trial = _copy(finished, tmp_path)
    run = trial.parent.parent
    before, times = _eval_rows(run), _stage_times(trial)
    (segment,) = trial.glob("eval/eval-*.parquet")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])
    expected = (
        rf"{re.escape(str(segment))} is not a readable Parquet file \(truncated\? "
        rf"{len(data) // 2} bytes\): .+; delete it and rerun the sweep to recompute it"
    )
    with pytest.raises(CorruptFile, match=f"^{expected}$"):
        load(run)
    for command in (["results", str(run)], ["claims", str(run)]):
        capsys.readouterr()
        assert main(command) == 1
        assert re.fullmatch(f"rope-lab: error: {expected}\n", capsys.readouterr().err)
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(segment))} is \d+ bytes, \d+ "):
        assert "finished" not in status_table(run)
    summary = run_sweep(load_spec(spec), out, runner="serial", progress=False)  # warned once
    assert summary.skipped == 0 and summary.count("done") == 1
    redone = {k for k, v in _stage_times(trial).items() if v != times[k]}
    assert redone == {segment.stem}
    assert _eval_rows(run).equals(before)
    assert "finished" in status_table(run)
    assert run_sweep(load_spec(spec), out, runner="serial", progress=False).skipped == 1


def test_a_truncated_model_is_retrained_from_its_last_checkpoint(finished, tmp_path):
    spec, out, trial = _copy(finished, tmp_path)
    times = _stage_times(trial)
    model = trial / "model.eqx"
    data = model.read_bytes()
    model.write_bytes(data[:100])
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(model))} is 100 bytes, "):
        summary = run_sweep(load_spec(spec), out, runner="serial", progress=False)
    assert summary.count("done") == 1
    assert {k for k, v in _stage_times(trial).items() if v != times[k]} == {"train"}
    assert model.read_bytes() == data
    done = json.loads((trial / "stages" / "train" / "done.json").read_text())
    assert done["resumed_from"] == 10 and done["files"]["model.eqx"]["bytes"] == len(data)


def test_a_run_written_before_file_records_resumes_unchanged(finished, tmp_path):
    spec, out, trial = _copy(finished, tmp_path)
    run = trial.parent.parent
    before = _eval_rows(run)
    for marker in [*trial.glob("stages/*/done.json"), trial / "_SUCCESS"]:
        record = json.loads(marker.read_text())
        assert record.pop("files")
        marker.write_text(json.dumps(record))
    (segment,) = trial.glob("eval/eval-*.parquet")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])  # unproven: trusted, as before
    summary = run_sweep(load_spec(spec), out, runner="serial", progress=False)
    assert summary.skipped == 1 and summary.count("done") == 0
    # the error says what recomputes it in such a run; doing so does
    with pytest.raises(CorruptFile) as info:
        load(run)
    hint = f"; delete it and {trial / '_SUCCESS'}, then rerun the sweep to recompute it"
    assert str(info.value).startswith(f"{segment} is not") and str(info.value).endswith(hint)
    segment.unlink()
    (trial / "_SUCCESS").unlink()
    times = _stage_times(trial)
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(segment))} is missing: "):
        assert run_sweep(load_spec(spec), out, runner="serial", progress=False).count("done")
    assert {k for k, v in _stage_times(trial).items() if v != times[k]} == {segment.stem}
    assert _eval_rows(run).equals(before)


@pytest.mark.parametrize(("segment", "resumed_from"), [(5, 0), (10, 5)])
def test_a_truncated_train_segment_is_rewritten_by_training_from_before_it(
    finished, tmp_path, segment, resumed_from
):
    spec, out, trial = _copy(finished, tmp_path)
    run = trial.parent.parent
    learned = ["step", "loss", "grad_norm", "lr"]  # not tokens_per_s: a timing
    rows = load(run).train.select(learned).sort("step").collect()
    path = trial / "train" / f"train_{segment:08d}.parquet"
    path.write_bytes(path.read_bytes()[:50])
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(path))} is 50 bytes, "):
        assert run_sweep(load_spec(spec), out, runner="serial", progress=False).count("done")
    done = json.loads((trial / "stages" / "train" / "done.json").read_text())
    assert done["resumed_from"] == resumed_from
    assert load(run).train.select(learned).sort("step").collect().equals(rows)

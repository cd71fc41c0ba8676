"""done.json proves the files its stage wrote: a missing or changed one unfinishes the stage;
a record-free done.json (older runs) is trusted while its segment is there; a superseded
segment still counts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rope_lab.results import append_rows
from rope_lab.trial.pipeline import _record, read_done, stage_dir
from rope_lab.trial.stage_files import StageRecomputed, stage_files

TRIAL = "t-1"


def _finished_eval_stage(run: Path, stage: str = "eval-ab12") -> tuple[Path, Path]:
    """(the stage folder, its eval segment) of a stage finished with `_record`."""
    trial = run / "trials" / TRIAL
    segment = append_rows(trial, "eval", [{"step": 1, "length": 16, "loss": 0.5}], segment=stage)
    folder = stage_dir(run, TRIAL, stage)
    folder.mkdir(parents=True)
    _record(folder, {"stage": stage, "status": "done"}, 0.0)
    return folder, segment


def test_a_stage_records_and_proves_only_its_own_files(tmp_path):
    folder, segment = _finished_eval_stage(tmp_path)
    trial = tmp_path / "trials" / TRIAL
    append_rows(trial, "eval", [{"step": 1, "length": 16, "loss": 0.7}], segment="eval-other")
    (trial / "model.eqx").write_bytes(b"m" * 10)
    assert stage_files(trial, "eval-ab12") == [segment]
    assert stage_files(trial, "train") == [trial / "model.eqx"]
    done = read_done(folder)
    assert done is not None and set(done["files"]) == {"eval/eval-ab12.parquet"}
    assert done["files"]["eval/eval-ab12.parquet"]["bytes"] == segment.stat().st_size


def test_a_changed_or_missing_file_unfinishes_the_stage_naming_it(tmp_path):
    folder, segment = _finished_eval_stage(tmp_path)
    data = segment.read_bytes()
    segment.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(segment, ns=(1, 1))
    with pytest.warns(StageRecomputed) as caught:
        assert read_done(folder) is None
    assert str(caught[0].message) == (
        f"{segment} has changed since it was written (checksum differs): stage eval-ab12 is "
        "not finished (a rerun recomputes it)"
    )
    segment.write_bytes(data)
    assert read_done(folder) is not None
    segment.unlink()
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(segment))} is missing: "):
        assert read_done(folder) is None


def test_a_superseded_segment_still_proves_its_stage(tmp_path):
    folder, segment = _finished_eval_stage(tmp_path)
    kept = tmp_path / "trials" / TRIAL / "superseded" / "eval" / segment.name
    kept.parent.mkdir(parents=True)
    segment.rename(kept)
    assert read_done(folder) is not None


def test_an_old_done_json_is_trusted_while_its_segment_is_there(tmp_path):
    folder, segment = _finished_eval_stage(tmp_path)
    marker = folder / "done.json"
    old = json.loads(marker.read_text())
    del old["files"]
    marker.write_text(json.dumps(old))
    segment.write_bytes(segment.read_bytes() + b"\0")  # unproven: trusted, as before
    assert read_done(folder) == old
    segment.unlink()  # what "delete it and rerun" asks: the stage runs again
    with pytest.warns(StageRecomputed) as caught:
        assert read_done(folder) is None
    assert str(caught[0].message) == (
        f"{segment} is missing: stage eval-ab12 is not finished (a rerun recomputes it)"
    )
    old_train = {"stage": "train", "status": "done"}
    model = tmp_path / "trials" / TRIAL / "model.eqx"
    train = stage_dir(tmp_path, TRIAL, "train")
    train.mkdir()
    (train / "done.json").write_text(json.dumps(old_train))
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(model))} is missing: stage"):
        assert read_done(train) is None
    model.write_bytes(b"m")
    assert read_done(train) == old_train
    (train / "done.json").write_text(json.dumps({**old_train, "status": "diverged"}))
    model.unlink()
    assert read_done(train) is not None  # a diverged run writes no model


def test_an_unreadable_done_json_is_not_finished(tmp_path):
    folder, _ = _finished_eval_stage(tmp_path)
    marker = folder / "done.json"
    marker.write_text('{"stage": "eval-ab12", "sta')
    with pytest.warns(StageRecomputed, match=rf"^{re.escape(str(marker))} is not valid JSON"):
        assert read_done(folder) is None

import json
from pathlib import Path

import pytest

from rope_lab.results.scan import RunDirError
from rope_lab.sweep.time_shares import stage_group, time_report, time_shares


def _stage(run: Path, trial: str, stage: str, start: float, wall: float, phases, status="done"):
    folder = run / "trials" / trial / "stages" / stage
    folder.mkdir(parents=True)
    done = {
        "stage": stage,
        "trial_id": trial,
        "status": status,
        "started_at": start,
        "finished_at": start + wall,
        "wall_time_s": wall,
        "phases": {k: {"wall_s": w, "compile_s": c} for k, (w, c) in phases.items()},
        "files": {},
    }
    (folder / "done.json").write_text(json.dumps(done))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    _stage(run, "t0", "train", 100.0, 10.0, {"setup": (1.0, 0.5), "train": (8.0, 2.0)})
    _stage(run, "t0", "eval-abc", 110.0, 4.0, {"io": (1.0, 0.0), "eval": (2.0, 1.0)})
    _stage(run, "t0", "yarn_x4-def", 114.0, 2.0, {"eval": (2.0, 0.0)})
    _stage(run, "t1", "train", 105.0, 50.0, {"train": (50.0, 0.0)}, status="failed")
    return run


def test_groups_are_the_stage_name_before_the_first_dash():
    assert [stage_group(s) for s in ("train", "eval-1a2b", "yarn_x4-ff", "decode-00")] == [
        "train",
        "eval",
        "yarn_x4",
        "decode",
    ]


def test_shares_sum_the_finished_stages_phases_and_their_uncovered_rest(run: Path):
    table, totals = time_shares([run])
    assert totals == {"stages": 3.0, "wall_s": 16.0, "compile_s": 3.5, "span_s": 16.0}
    cells = {(r["group"], r["phase"]): r for r in table.iter_rows(named=True)}
    assert cells["train", "train"]["run_s"] == 6.0
    assert cells["train", "other"]["wall_s"] == 1.0  # 10 s of stage, 9 s in its phases
    assert cells["eval", "other"]["wall_s"] == 1.0
    assert cells["yarn_x4", "eval"]["wall_share"] == 2.0 / 16.0
    assert sum(table["wall_s"]) == pytest.approx(16.0)


def test_the_report_splits_stage_time_into_training_evaluating_compiling_and_the_rest(run: Path):
    text = time_report([run])
    # training 8 - 2; evaluating (2 - 1) + 2; compiling 0.5 + 2 + 1; the rest 16 - 12.5
    assert "3 finished stages, 16 s of stage time: training 6 s (38%), evaluating 3 s (19%)" in text
    assert "compiling 4 s (22%), setup, I/O and the rest 4 s (22%)" in text
    assert "NTK tracking" not in text
    assert "span (first stage start to last stage end): 16 s (1.00 stages at a time" in text


def test_a_path_that_is_no_run_directory_is_named(tmp_path: Path):
    with pytest.raises(RunDirError, match="no such directory"):
        time_shares([tmp_path / "missing"])

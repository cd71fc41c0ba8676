"""Where commands may write: run directories and output files (`rope_lab.results.targets`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rope_lab.results.targets import TargetError, check_output_file, check_run_target


def _run(folder: Path) -> Path:
    (folder / "trials" / "t1" / "eval").mkdir(parents=True)
    (folder / "trials" / "t1" / "eval" / "eval-a.parquet").write_bytes(b"PAR1")
    return folder


def test_a_run_goes_only_into_a_new_empty_or_run_folder(tmp_path: Path) -> None:
    check_run_target(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_run_target(tmp_path / "empty")
    check_run_target(_run(tmp_path / "run"))
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("notes")
    with pytest.raises(TargetError) as err:
        check_run_target(mine)
    assert str(err.value) == (
        f"--out: {mine} holds notes.txt, sub/ and is not a run directory (no trials/ folder); "
        "rope-lab writes a run only into a new or empty folder or a run directory"
    )
    with pytest.raises(TargetError, match=r"^--out: .*notes.txt is a file, not a run directory"):
        check_run_target(mine / "notes.txt")


def test_an_output_file_is_never_a_folder_nor_inside_the_results_read(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    out = check_output_file(tmp_path / "new" / "deeper" / "table.csv", [run])
    assert out.parent.is_dir() and not out.exists()  # its folder made, nothing written
    assert check_output_file(run / "summary.csv", [run]) == run / "summary.csv"  # beside trials/
    with pytest.raises(TargetError, match=r"^--output: .*run is a folder; give the path"):
        check_output_file(run, [run])
    segment = run / "trials" / "t1" / "eval" / "eval-a.parquet"
    with pytest.raises(TargetError) as err:
        check_output_file(segment, [run])
    assert str(err.value) == (
        f"--output: {segment} is inside {run / 'trials'}, the results this command reads; "
        "write it elsewhere"
    )
    assert segment.read_bytes() == b"PAR1"
    with pytest.raises(TargetError, match="inside"):  # the same file through another spelling
        check_output_file(tmp_path / "run" / "trials" / ".." / "trials" / "x.csv", [run])

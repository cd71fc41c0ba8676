"""The end-of-sweep text: summary table (per-task metric, honest length columns), the failed and
diverged trials with their exception lines, and where the results are."""

import math
from pathlib import Path

import pytest

from rope_lab.results import RunDirError, append_rows, mark_success, trial_dir, write_trial_row
from rope_lab.sweep.report import (
    failure_lines,
    last_line,
    next_steps,
    status_table,
    summary_frame,
    summary_table,
)
from rope_lab.trial.pipeline import finish_trial
from tests.helpers import tiny_trial

TRACEBACK = """Traceback (most recent call last):
  File "rope_lab/trial/pipeline.py", line 120, in _guarded
    result = work()
ValueError: lm_text: the eval split holds 5 bytes, fewer than L+1 = 17
"""


def _trial(
    run: Path,
    tid: str,
    task: str,
    status: str,
    evals: list[tuple],
    bytes_per_token: float | None = None,
) -> None:
    """A trials row and base-eval rows (method, factor, finetune_steps, length, loss, acc);
    with ``bytes_per_token``, bits per byte = loss / bytes_per_token / ln 2."""
    folder = trial_dir(run, tid)
    config = {"task.name": task, "train.length": 16, "model.position.kind": "alibi"}
    write_trial_row(folder, {"status": status, "sweep": "s", "wall_time_s": 1.0}, config)
    append_rows(folder, "train", [{"step": 10, "loss": 1.5}], segment="train_0")
    rows = [
        {"step": 10, "method": m, "factor": f, "finetune_steps": ft, "length": n, "loss": loss,
         "accuracy": acc}
        for m, f, ft, n, loss, acc in evals
    ]  # fmt: skip
    for row in rows if bytes_per_token else []:
        row["bits_per_byte"] = row["loss"] / bytes_per_token / math.log(2)
    if rows:
        append_rows(folder, "eval", rows, segment="eval_base")
    mark_success(folder)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "mixed"
    # LM task: read by loss; 16 and 32 keep loss <= 2.0 / 0.9, 64 does not
    _trial(
        run,
        "lm",
        "lm_text",
        "done",
        [
            ("none", 1.0, 0, 16, 2.0, 0.5),
            ("none", 1.0, 0, 32, 2.2, 0.1),
            ("none", 1.0, 0, 64, 3.0, 0.9),
            ("temperature", 1.0, 0, 64, 0.1, 1.0),  # a scaling: not the model as trained
        ],
    )
    # synthetic task: read by accuracy; 32 drops below 0.9 x 1.0, so 64 (0.95) does not count
    _trial(
        run,
        "pk",
        "passkey",
        "done",
        [
            ("none", 1.0, 0, 16, 0.1, 1.0),
            ("none", 1.0, 0, 32, 0.2, 0.8),
            ("none", 1.0, 0, 64, 0.3, 0.95),
        ],
    )
    _trial(run, "pk-div", "passkey", "diverged", [])
    return run


def test_summary_reads_each_task_by_its_metric_and_names_lengths_honestly(run: Path) -> None:
    frame = summary_frame(run)
    assert frame.columns == [
        "trial_id", "status", "wall_time_s", "n_params", "final_loss", "metric", "@L_train",
        "@longest", "longest_evaluated", "longest_kept", "effective_length",
    ]  # fmt: skip
    rows = {r["trial_id"]: r for r in frame.iter_rows(named=True)}
    assert {k: rows["lm"][k] for k in frame.columns[5:]} == {
        "metric": "loss",
        "@L_train": 2.0,
        "@longest": 3.0,
        "longest_evaluated": 64,
        "longest_kept": 32,
        "effective_length": 32,  # a loss: the bar is longest_kept's (2.2 <= 2.0 / 0.9, 3.0 not)
    }
    assert {k: rows["pk"][k] for k in frame.columns[5:]} == {
        "metric": "accuracy",
        "@L_train": 1.0,
        "@longest": 0.95,
        "longest_evaluated": 64,
        "longest_kept": 16,
        "effective_length": 16,  # accuracy 1.0 at 16 >= 0.9, 0.8 at 32 not
    }
    assert rows["pk-div"]["status"] == "diverged" and rows["pk-div"]["metric"] is None


def test_summary_reads_a_text_model_by_bits_per_byte(tmp_path: Path) -> None:
    """A BPE model of 4 bytes a token: its row reads bits per byte, loss / (4 ln 2): 2.0 and
    3.0 nats per token are 0.7213475 and 1.0820213 bits per byte; the kept length is the
    loss's (a constant factor keeps every ratio)."""
    run = tmp_path / "runs" / "bpe"
    evals = [("none", 1.0, 0, 16, 2.0, 0.5), ("none", 1.0, 0, 32, 2.2, 0.1),
             ("none", 1.0, 0, 64, 3.0, 0.9)]  # fmt: skip
    _trial(run, "bpe", "lm_tokens", "done", evals, bytes_per_token=4.0)
    (row,) = summary_frame(run).iter_rows(named=True)
    assert row["metric"] == "bits_per_byte"
    assert row["@L_train"] == pytest.approx(0.7213475204)
    assert row["@longest"] == pytest.approx(1.0820212807)
    assert (row["longest_evaluated"], row["longest_kept"]) == (64, 32)


def test_effective_length_is_an_absolute_bar_from_the_shortest_length(tmp_path: Path) -> None:
    """Accuracy 0.8 at 8, 0.95 at L_train 16, 0.9 at 32, 0.86 at 64: longest_kept (>= 0.9 x
    0.95 = 0.855 from 16 on) reaches 64; the effective length (>= 0.9 at every length from 8)
    has none, since 8 misses the bar; without the row at 8 it is 32 (0.86 < 0.9)."""
    run = tmp_path / "runs" / "pk"
    evals = [("none", 1.0, 0, n, 0.1, a) for n, a in ((8, 0.8), (16, 0.95), (32, 0.9), (64, 0.86))]
    _trial(run, "pk", "passkey", "done", evals)
    _trial(run, "pk-long", "passkey", "done", evals[1:])
    rows = {r["trial_id"]: r for r in summary_frame(run).iter_rows(named=True)}
    assert (rows["pk"]["longest_kept"], rows["pk"]["effective_length"]) == (64, None)
    assert (rows["pk-long"]["longest_kept"], rows["pk-long"]["effective_length"]) == (64, 32)


def test_summary_table_text(run: Path) -> None:
    lines = summary_table(run).splitlines()
    header = next(line for line in lines if "trial_id" in line)
    names = [c.strip() for c in header.strip("│ ").split("┆")]
    assert names[5:] == [
        "metric", "@L_train", "@longest", "longest_evaluated", "longest_kept", "effective_length"
    ]  # fmt: skip
    assert "max_len" not in "\n".join(lines)
    assert lines[-1] == (
        "metric: bits_per_byte for text language models (loss where a row lacks it), loss for "
        "other language-model tasks, accuracy otherwise, as trained (no scaling, no "
        "fine-tuning); @L_train / @longest: at the training length / at longest_evaluated; "
        "longest_kept: longest length up to which every evaluated length keeps >= 90% of the "
        "L_train value (loss: <= L_train loss / 0.9); effective_length (RULER's): longest "
        "length up to which every evaluated length has accuracy >= 0.9 (loss: as longest_kept)"
    )


def test_summary_table_without_trials(tmp_path: Path) -> None:
    (tmp_path / "empty" / "trials").mkdir(parents=True)
    assert summary_table(tmp_path / "empty") == "(no finished trials)"


def test_failure_lines_name_the_exception_and_the_traceback_file(run: Path) -> None:
    cfg = tiny_trial("alibi")
    results = [{"stage": "train", "status": "failed", "error": TRACEBACK}]
    assert finish_trial(run, cfg, results, sweep="mixed") == "failed"
    error_file = run / "trials" / cfg.trial_id / "error.txt"
    assert error_file.read_text() == TRACEBACK
    assert failure_lines(run) == [
        f"failed    {cfg.trial_id}: ValueError: lm_text: the eval split holds 5 bytes, fewer "
        "than L+1 = 17",
        f"          traceback: {error_file}",
        "diverged  pk-div: non-finite training loss (a result; no traceback)",
    ]
    assert failure_lines(run, ["pk", "pk-div"]) == [
        "diverged  pk-div: non-finite training loss (a result; no traceback)"
    ]
    # a rerun that succeeds removes the stale traceback
    assert finish_trial(run, cfg, [{"stage": "train", "status": "done"}], sweep="mixed") == "done"
    assert not error_file.exists()


def test_failure_without_a_traceback_file_points_at_the_trials_table(run: Path) -> None:
    folder = trial_dir(run, "old")
    row = {"status": "failed", "sweep": "s", "error": "RayTaskError: worker died"}
    write_trial_row(folder, row, {"task.name": "passkey"})
    assert failure_lines(run, ["old"]) == [
        "failed    old: RayTaskError: worker died",
        "          traceback: the error column of the trials table",
    ]


def test_last_line() -> None:
    assert last_line(TRACEBACK).startswith("ValueError: lm_text")
    assert last_line(None) == last_line("") == "(no error recorded)"


def test_next_steps_name_the_run_directory() -> None:
    assert next_steps(Path("runs/smoke")) == [
        "run directory: runs/smoke",
        "  rope-lab results runs/smoke",
        "  rope-lab plot extrapolation runs/smoke",
        "  rope-lab sweep status runs/smoke",
    ]
    assert next_steps(Path("my runs/x"))[1] == "  rope-lab results 'my runs/x'"


def test_status_of_a_run_directory_and_of_its_parent(run: Path) -> None:
    (run / "trials" / "pending").mkdir()
    text = status_table(run)
    assert "pending" in text and "pk-div" in text and text.count("finished") >= 3
    parent = status_table(run.parent)
    assert parent.startswith(f"{run}:\n") and parent.endswith(text)
    missing = run.parent / "nothing"
    with pytest.raises(
        RunDirError, match=rf"^not a run directory \(no such directory\): {missing}$"
    ):
        status_table(missing)


def _state(run: Path, trial_id: str) -> str:
    """The state column of `trial_id`'s line of `status_table` (ids are cut to fit)."""
    (line,) = [line for line in status_table(run).splitlines() if trial_id[:20] in line]
    return line.split("┆")[1].strip()


def test_a_trial_whose_row_says_failed_is_failed_in_status(run: Path) -> None:
    cfg = tiny_trial("alibi")
    done = [{"stage": "train", "status": "done"}]
    assert finish_trial(run, cfg, done, sweep="mixed") == "done"
    folder = run / "trials" / cfg.trial_id
    assert (folder / "_SUCCESS").is_file()
    assert _state(run, cfg.trial_id) == "finished"
    # a later spec's stage fails: the row says failed, the earlier _SUCCESS goes
    failed = [*done, {"stage": "eval-x", "status": "failed", "error": TRACEBACK}]
    assert finish_trial(run, cfg, failed, sweep="mixed") == "failed"
    assert not (folder / "_SUCCESS").exists()
    assert _state(run, cfg.trial_id) == "failed"
    mark_success(folder)  # a marker left by an older rope_lab: the row still decides
    assert _state(run, cfg.trial_id) == "failed"

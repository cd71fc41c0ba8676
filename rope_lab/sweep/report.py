"""Text of a run directory: the end-of-sweep summary (table, failures, where the results are)
and `rope-lab sweep status`."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from rope_lab.results import (
    is_finished,
    load,
    run_directories,
    trial_dir,
)
from rope_lab.results.schema import TRIAL_SEGMENT
from rope_lab.runtime.checked_files import read_parquet
from rope_lab.sweep.stages import STAGES_DIR, read_done
from rope_lab.trial.pipeline import ERROR_FILE


def _trial_folders(run_dir: Path) -> list[Path]:
    root = run_dir / "trials"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


THRESHOLD = 0.9  # fraction of the L_train value a length must keep (`extrapolation_summary`)
_TABLE_CONFIG = {
    "tbl_rows": -1,
    "tbl_cols": -1,
    "tbl_width_chars": 200,
    "float_precision": 3,
    "fmt_str_lengths": 80,
    "tbl_hide_dataframe_shape": True,
    "tbl_hide_column_data_types": True,
}


def summary_frame(run_dir: Path, *, threshold: float = THRESHOLD) -> pl.DataFrame:
    """One row per trial of the trials table: status, wall time, params, final training loss,
    then for the model as trained (no RoPE scaling, no fine-tuning) its task's metric
    (`query.task_metrics`: bits per byte for text language models whose rows have it, else loss
    for language-model tasks, accuracy otherwise; named in the
    `metric` column, so a run mixing tasks shows each with its own) at L_train (`@L_train`)
    and at the longest evaluated length (`@longest`), that length (`longest_evaluated`), and
    `longest_kept`: the longest length up to which every evaluated length keeps `threshold` x
    the L_train value (loss: at most the L_train loss / `threshold`), i.e. how far the model
    extrapolates (`query.extrapolation_summary`'s `longest_length`), and `effective_length`,
    RULER's: the longest length up to which every evaluated length meets an absolute bar
    (accuracy >= `threshold` from the shortest length; loss: the same bar as longest_kept)."""
    from rope_lab.analysis import query as q

    res = load(run_dir)
    final_loss = (
        res.train.sort("step").group_by("trial_id").agg(pl.col("loss").last().alias("final_loss"))
    )
    columns = res.eval_with_config.collect_schema().names()
    base = res.eval_with_config.filter(
        pl.col("position_bucket").is_null()
        & pl.col("mode").is_null()
        & pl.col("depth").is_null()
        & (pl.col("finetune_steps").fill_null(0) == 0)
        & q.trained_expr(columns)
    ).collect()
    per_trial = []
    for task, metric in q.task_metrics(base).items():
        rows = base if task is None else base.filter(pl.col("task.name") == task)
        if rows.is_empty():
            continue
        value = pl.col(metric).cast(pl.Float64)
        at = (
            rows.sort("length")
            .group_by("trial_id", maintain_order=True)
            .agg(
                pl.lit(metric).alias("metric"),
                value.filter(pl.col("length") == pl.col("train.length")).first().alias("@L_train"),
                value.last().alias("@longest"),
                pl.col("length").last().alias("longest_evaluated"),
            )
        )
        kept = q.extrapolation_summary(rows, threshold=threshold, metric=metric).select(
            "trial_id", pl.col("longest_length").alias("longest_kept"), "effective_length"
        )
        per_trial.append(at.join(kept, on="trial_id", how="left"))
    evals = (
        pl.concat(per_trial)
        if per_trial
        else pl.DataFrame(
            schema={
                "trial_id": pl.String,
                "metric": pl.String,
                "@L_train": pl.Float64,
                "@longest": pl.Float64,
                "longest_evaluated": pl.Int64,
                "longest_kept": pl.Int64,
                "effective_length": pl.Int64,
            }
        )
    )
    return (
        res.trials.select("trial_id", "status", pl.col("wall_time_s").round(1), "n_params")
        .join(final_loss, on="trial_id", how="left")
        .collect()
        .join(evals, on="trial_id", how="left")
        .sort("trial_id")
    )


def summary_table(run_dir: Path, *, threshold: float = THRESHOLD) -> str:
    """`summary_frame` as text, then a legend line; "(no finished trials)" without trials."""
    table = summary_frame(run_dir, threshold=threshold)
    if table.is_empty():
        return "(no finished trials)"
    legend = (
        "metric: bits_per_byte for text language models (loss where a row lacks it), loss for "
        "other language-model tasks, accuracy otherwise, as trained (no scaling, no "
        "fine-tuning); @L_train / @longest: at the training length / at longest_evaluated; "
        f"longest_kept: longest length up to which every evaluated length keeps >= "
        f"{threshold:.0%} of the L_train value (loss: <= L_train loss / {threshold:g}); "
        f"effective_length (RULER's): longest length up to which every evaluated length has "
        f"accuracy >= {threshold:g} (loss: as longest_kept)"
    )
    with pl.Config(**_TABLE_CONFIG):  # type: ignore[arg-type]
        return f"{table}\n{legend}"


def last_line(error: str | None) -> str:
    """The exception line of a traceback (its last non-empty line), e.g. 'ValueError: ...'."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no error recorded)"


def failure_lines(run_dir: Path, trial_ids: Iterable[str] | None = None) -> list[str]:
    """For each failed or diverged trial of `run_dir` (of `trial_ids` when given), in id order:
    `failed    ID: <exception line>` then `          traceback: <RUN_DIR/trials/ID/error.txt>`
    (the trials row's `error` column when no file was written), or
    `diverged  ID: non-finite training loss (a result; no traceback)`."""
    trials = load(run_dir).trials.select("trial_id", "status", "error").collect()
    wanted = None if trial_ids is None else set(trial_ids)
    out = []
    for trial_id, status, error in trials.sort("trial_id").iter_rows():
        if wanted is not None and trial_id not in wanted:
            continue
        if status == "diverged":
            out.append(f"diverged  {trial_id}: non-finite training loss (a result; no traceback)")
        elif status == "failed":
            path = trial_dir(run_dir, trial_id) / ERROR_FILE
            where = str(path) if path.exists() else "the error column of the trials table"
            out.append(f"failed    {trial_id}: {last_line(error)}")
            out.append(f"          traceback: {where}")
    return out


def next_steps(run_dir: Path) -> list[str]:
    """Where a run's results are and the commands that read them (the run directory itself,
    e.g. `runs/smoke`: `--out` is its parent)."""
    where = shlex.quote(str(run_dir))
    return [
        f"run directory: {run_dir}",
        f"  rope-lab results {where}",
        f"  rope-lab plot extrapolation {where}",
        f"  rope-lab sweep status {where}",
    ]


def status_table(run_dir: Path) -> str:
    """Every trial folder with its state: finished, failed (its trials row says so), or which
    stages are done / pending; for a folder of run directories (the `--out` of `sweep run`),
    each run's table under its path. RunDirError (one line, as `rope-lab results`) for a path
    that is neither."""
    runs = run_directories(run_dir)
    if runs == (run_dir,):
        return _status_of_run(run_dir)
    return "\n\n".join(f"{run}:\n{_status_of_run(run)}" for run in runs)


def _row_status(folder: Path) -> str | None:
    """The status in a trial's trials row, or None before it has one."""
    path = folder / "trials" / f"{TRIAL_SEGMENT}.parquet"
    if not path.is_file():
        return None
    return str(read_parquet(path, ["status"])["status"][0])


def _status_of_run(run_dir: Path) -> str:
    rows = []
    for folder in _trial_folders(run_dir):
        stages = sorted((folder / STAGES_DIR).glob("*")) if (folder / STAGES_DIR).exists() else []
        done = [s.name for s in stages if read_done(s) is not None]
        if _row_status(folder) == "failed":
            state = "failed"
        else:
            state = "finished" if is_finished(folder) else ("started" if stages else "pending")
        rows.append(
            {
                "trial_id": folder.name,
                "state": state,
                "stages_done": len(done),
                "stages_seen": len(stages),
            }
        )
    if not rows:
        return f"{run_dir}: no trials yet"
    frame = pl.DataFrame(rows)
    counts = frame.group_by("state").len().sort("state")
    with pl.Config(
        tbl_rows=-1,
        tbl_width_chars=200,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        return f"{frame}\n{counts}"

"""Text tables of a run directory: the end-of-sweep summary and `rope-lab sweep status`."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rope_lab.results import is_finished, load
from rope_lab.sweep.stages import STAGES_DIR, read_done


def _trial_folders(run_dir: Path) -> list[Path]:
    root = run_dir / "trials"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def summary_table(run_dir: Path) -> str:
    """One line per finished trial: status, wall time, params, final loss, and for the base
    evaluation the accuracy at L_train and at the longest evaluated length."""
    res = load(run_dir)
    trials = res.trials.collect()
    if trials.is_empty():
        return "(no finished trials)"
    final_loss = (
        res.train.sort("step").group_by("trial_id").agg(pl.col("loss").last().alias("final_loss"))
    )
    base = res.eval_with_config.filter(
        pl.col("position_bucket").is_null()
        & (pl.col("method") == pl.first("method").over("trial_id"))
    )
    at_train = base.filter(pl.col("length") == pl.col("train.length")).select(
        "trial_id", pl.col("accuracy").alias("acc@L_train")
    )
    longest = (
        base.sort("length")
        .group_by("trial_id")
        .agg(pl.col("length").last().alias("max_len"), pl.col("accuracy").last().alias("acc@max"))
    )
    table = (
        res.trials.select("trial_id", "status", pl.col("wall_time_s").round(1), "n_params")
        .join(final_loss, on="trial_id", how="left")
        .join(at_train, on="trial_id", how="left")
        .join(longest, on="trial_id", how="left")
        .sort("trial_id")
        .collect()
    )
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=200,
        float_precision=3,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        return str(table)


def status_table(run_dir: Path) -> str:
    """Every trial folder with its state: finished, or which stages are done / pending."""
    rows = []
    for folder in _trial_folders(run_dir):
        stages = sorted((folder / STAGES_DIR).glob("*")) if (folder / STAGES_DIR).exists() else []
        done = [s.name for s in stages if read_done(s) is not None]
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

"""Where a run's time went: every finished stage's wall and XLA-compile seconds, per stage and
phase, as shares of the whole (`rope-lab sweep time RUN_DIR`).

Each stage's `done.json` holds its wall time and, per phase (`rope_lab.runtime.timing`), its
wall and compile seconds. A stage's group is its name before the first `-`: `train`, `eval`
(the model as trained), one group per scaling stage (`yarn_x4`, ...), `decode`. Shares are of
the summed stage wall time, which exceeds the run's span (first start to last finish) when
stages ran side by side; the span is reported beside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from rope_lab.results import run_directories
from rope_lab.sweep.stages import STAGES_DIR, read_done

SCHEMA = {
    "group": pl.String,
    "phase": pl.String,
    "stages": pl.Int64,
    "wall_s": pl.Float64,
    "compile_s": pl.Float64,
    "run_s": pl.Float64,
    "wall_share": pl.Float64,
}


def _done_records(run_dirs: Sequence[Path]) -> Iterator[dict]:
    for run_dir in run_directories(run_dirs):
        for marker in sorted((run_dir / "trials").glob(f"*/{STAGES_DIR}/*/done.json")):
            done = read_done(marker.parent)
            if done is not None and done.get("status") == "done":
                yield done


def stage_group(stage: str) -> str:
    """The group a stage name belongs to: its text before the first `-` (`train` has none)."""
    return stage.split("-", 1)[0]


def time_shares(run_dirs: Sequence[Path]) -> tuple[pl.DataFrame, dict[str, float]]:
    """(table, totals) of the finished stages of run directories (or folders of them; a
    RunDirError names a path that is neither). The table has one row per (group, phase):
    stages, wall_s, compile_s, run_s = wall_s - compile_s, and wall_share (of all stages'
    summed wall); the time a stage's phases do not cover is the phase `other`. Totals:
    `stages`, `wall_s`, `compile_s` and `span_s` (first stage start to last stage end)."""
    cells: dict[tuple[str, str], list[float]] = {}
    starts, ends, total_wall = [], [], 0.0
    for done in _done_records(run_dirs):
        group, wall = stage_group(str(done["stage"])), float(done.get("wall_time_s", 0.0))
        total_wall += wall
        starts.append(float(done.get("started_at", 0.0)))
        ends.append(float(done.get("finished_at", 0.0)))
        covered = 0.0
        phases = dict(done.get("phases", {}))
        for phase, times in phases.items():
            cell = cells.setdefault((group, phase), [0.0, 0.0, 0.0])
            cell[0] += 1
            cell[1] += float(times["wall_s"])
            cell[2] += float(times["compile_s"])
            covered += float(times["wall_s"])
        cell = cells.setdefault((group, "other"), [0.0, 0.0, 0.0])
        cell[0] += 1
        cell[1] += max(wall - covered, 0.0)
    rows = [
        {
            "group": group,
            "phase": phase,
            "stages": int(n),
            "wall_s": wall,
            "compile_s": comp,
            "run_s": wall - comp,
            "wall_share": wall / total_wall if total_wall > 0 else 0.0,
        }
        for (group, phase), (n, wall, comp) in sorted(cells.items())
    ]
    table = pl.DataFrame(rows, schema=SCHEMA)
    totals = {
        "stages": float(len(starts)),
        "wall_s": total_wall,
        "compile_s": float(table["compile_s"].sum()) if rows else 0.0,
        "span_s": max(ends) - min(starts) if starts else 0.0,
    }
    return table, totals


def time_report(run_dirs: Sequence[Path]) -> str:
    """`time_shares` as text: the table, then the split of all stage time into training
    (`train` and `finetune` phases less their compilation), evaluating (`eval` and `decode`
    phases less theirs), NTK tracking (when any), compiling and the rest (setup, I/O,
    uncovered), and the run's span."""
    table, totals = time_shares(run_dirs)
    if table.is_empty():
        return f"{', '.join(map(str, run_dirs))}: no finished stages yet"
    wall = totals["wall_s"]

    def run_seconds(phases: list[str]) -> float:
        return float(table.filter(pl.col("phase").is_in(phases))["run_s"].sum())

    parts = {
        "training": run_seconds(["train", "finetune"]),
        "evaluating": run_seconds(["eval", "decode"]),
        "NTK tracking": run_seconds(["ntk"]),
        "compiling": totals["compile_s"],
    }
    parts["setup, I/O and the rest"] = wall - sum(parts.values())
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        text = str(table.with_columns(pl.col(pl.Float64).round(3)))
    shares = ", ".join(
        f"{name} {seconds:.0f} s ({seconds / wall:.0%})"
        for name, seconds in parts.items()
        if seconds > 0 or name != "NTK tracking"
    )
    return (
        f"{text}\n{int(totals['stages'])} finished stages, {wall:.0f} s of stage time: {shares}"
        f"\nspan (first stage start to last stage end): {totals['span_s']:.0f} s"
        f" ({wall / max(totals['span_s'], 1e-9):.2f} stages at a time on average)"
    )


__all__ = ["stage_group", "time_report", "time_shares"]

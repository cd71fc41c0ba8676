"""What a trial logs to its trackers and when: the train stage's rows as they are logged (a
training hook), its NTK rows as they are measured, and, once the trial has finished, its
evaluation rows (one scalar per length, at the trained model's step)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rope_lab.config import TrialConfig
from rope_lab.hooks import Hook, StepState
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.tracking.config import TrackingConfig
from rope_lab.tracking.runs import TrialTracker
from rope_lab.tracking.scalars import eval_scalars, ntk_scalars, train_scalars


def train_hook(tracker: TrialTracker, every: int, start: int) -> Hook:
    """A hook logging each train row of the loop's history past step `start` (a resumed run's
    first step), every `every` steps (`train.log_every`) and at the end."""
    logged, seen = start, 0  # the loop only appends to its history: read the new rows only

    def log(state: StepState) -> None:
        nonlocal logged, seen
        for row in state.history[seen:]:
            if row["step"] > logged:
                tracker.log(row["step"], train_scalars(row))
                logged = row["step"]
        seen = len(state.history)

    return Hook(every=every, fn=log)


def ntk_sink(
    tracker: TrialTracker, sink: Callable[[int, list[dict]], None]
) -> Callable[[int, list[dict]], None]:
    """`sink` (the NTK rows into the `ntk` table), then the rows to the trackers."""

    def both(step: int, rows: list[dict]) -> None:
        sink(step, rows)
        tracker.log(step, ntk_scalars(rows))

    return both


def log_evaluation(tracking: TrackingConfig, run_dir: Path, cfg: TrialConfig) -> list[str]:
    """Log a finished trial's evaluation rows (its `eval` table) to its runs, at step
    `train.steps`; returns the warnings of trackers that failed."""
    tracker = TrialTracker(tracking, cfg, resume_step=None)
    try:
        rows = read_trial_table(trial_dir(run_dir, cfg.trial_id), "eval").to_dicts()
        tracker.log(cfg.train.steps, eval_scalars(rows))
    finally:
        tracker.close()
    return tracker.warnings

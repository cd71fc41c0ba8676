"""One trial end to end: build the task and model, train, evaluate across lengths and scalings."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rope_lab.config import TrialConfig
from rope_lab.evaluate import evaluate_model, extrapolation_summary, finetune_and_evaluate
from rope_lab.model import Transformer, count_params
from rope_lab.train import Hook, TrainResult, make_task_from, train


@dataclass
class TrialOutcome:
    """Everything a trial produced: status, loss curve, eval rows, summary, final model."""

    config: TrialConfig
    status: str  # "done" | "diverged"
    history: list[dict]
    eval_rows: list[dict]
    summary: list[dict]
    model: Transformer
    n_params: int
    tokens_seen: int
    wall_time_s: float
    train_time_s: float
    extra: dict = field(default_factory=dict)


def run_trial(
    cfg: TrialConfig,
    *,
    hooks: Sequence[Hook] = (),
    resume: TrainResult | None = None,
    start_step: int = 0,
) -> TrialOutcome:
    """Train `cfg` (optionally resuming model/opt state at `start_step`) and evaluate it.

    A diverged run is a result: it is evaluated no further and reported with status "diverged".
    """
    start = time.perf_counter()
    task = make_task_from(cfg)
    result = train(
        cfg,
        model=None if resume is None else resume.model,
        opt_state=None if resume is None else resume.opt_state,
        start_step=start_step,
        hooks=hooks,
    )
    train_time = time.perf_counter() - start
    rows: list[dict] = []
    if not result.diverged:
        rows = evaluate_model(result.model, task, cfg, step=result.steps_done)
        rows += finetune_and_evaluate(result.model, task, cfg, step=result.steps_done)
    summary = extrapolation_summary(rows, cfg.train.length, cfg.eval.accuracy_threshold)
    return TrialOutcome(
        config=cfg,
        status="diverged" if result.diverged else "done",
        history=result.history,
        eval_rows=rows,
        summary=summary,
        model=result.model,
        n_params=count_params(result.model),
        tokens_seen=result.tokens_seen,
        wall_time_s=time.perf_counter() - start,
        train_time_s=train_time,
    )


def write_outcome(outcome: TrialOutcome, run_dir: Path) -> Path:
    """Store a finished trial under `run_dir/trials/<id>/` in the sweep results layout
    (config.yaml, train/eval Parquet segments, trials row, final model, `_SUCCESS`)."""
    import yaml

    from rope_lab.atomic import atomic_write_text
    from rope_lab.checkpoint import save_model
    from rope_lab.config import to_dict
    from rope_lab.results import append_rows, mark_success, trial_dir, write_trial_row

    cfg = outcome.config
    folder = trial_dir(run_dir, cfg.trial_id)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    if outcome.history:
        append_rows(folder, "train", outcome.history, segment="train")
    if outcome.eval_rows:
        append_rows(folder, "eval", outcome.eval_rows, segment="eval")
    save_model(folder / "model.eqx", outcome.model)
    now = dt.datetime.now(dt.UTC)
    row = {
        "trial_id": cfg.trial_id,
        "sweep": cfg.name,
        "status": outcome.status,
        "wall_time_s": outcome.wall_time_s,
        "n_params": outcome.n_params,
        "tokens_seen": outcome.tokens_seen,
        "started_at": now - dt.timedelta(seconds=outcome.wall_time_s),
        "finished_at": now,
    }
    write_trial_row(folder, row, cfg)
    mark_success(folder)
    return folder

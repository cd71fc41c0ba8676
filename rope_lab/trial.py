"""One trial end to end: build the task and model, train, evaluate across lengths and scalings."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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

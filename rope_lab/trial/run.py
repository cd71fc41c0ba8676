"""One trial end to end in this process: the sweep's stages (`rope_lab.trial.pipeline`) into a run
directory, read back as a `TrialOutcome` (loss curve, eval rows, summary, trained model)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from rope_lab.config import TrialConfig
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.trial.pipeline import MODEL_FILE, TRAIN_STAGE, run_trial_stages

if TYPE_CHECKING:
    from rope_lab.model.transformer import Transformer


class TrialError(RuntimeError):
    """A stage of the trial failed (the message holds its traceback) or is held elsewhere."""


@dataclass
class TrialOutcome:
    """Everything a trial produced: status, loss curve, eval rows, summary, final model."""

    config: TrialConfig
    status: str  # "done" | "diverged"
    history: list[dict]
    eval_rows: list[dict]
    summary: list[dict]
    model: Transformer | None  # None when diverged (no model is saved)
    n_params: int
    tokens_seen: int
    wall_time_s: float  # all stages, as in the trials row
    train_time_s: float
    folder: Path | None = None  # the trial's files; None when they went to a temporary folder
    stages: list[dict] = field(default_factory=list)  # each stage's result


def run_trial(cfg: TrialConfig, run_dir: str | Path | None = None) -> TrialOutcome:
    """Train `cfg`, evaluate it under every scaling and store it as a sweep does, under
    `run_dir/trials/<trial_id>/` (None: a temporary folder, removed on return).

    Reruns into the same `run_dir` resume an interrupted trial and reuse finished stages. A
    diverged run is a result: status "diverged", no evaluation. Raises TrialError when a stage
    fails or another process holds one.
    """
    if run_dir is None:
        with tempfile.TemporaryDirectory(prefix="rope_lab_trial_") as tmp:
            return _run(cfg, Path(tmp), keep=False)
    return _run(cfg, Path(run_dir), keep=True)


def _run(cfg: TrialConfig, run_dir: Path, *, keep: bool) -> TrialOutcome:
    from rope_lab.model.factory import make_model
    from rope_lab.trial.checkpoint import load_model
    from rope_lab.trial.evaluate import extrapolation_summary
    from rope_lab.trial.scaling_plan import scalings_for

    status, stages = run_trial_stages(cfg, run_dir)
    if status not in ("done", "diverged"):
        errors = [f"stage {r.get('stage')}: {r.get('error', r['status'])}" for r in stages]
        raise TrialError(f"trial {cfg.trial_id} {status}:\n" + "\n".join(errors))
    folder = trial_dir(run_dir, cfg.trial_id)
    train = next(r for r in stages if r.get("stage") == TRAIN_STAGE)
    history = read_trial_table(folder, "train").drop("trial_id").sort("step").to_dicts()
    order = {(s.method, s.factor): i for i, s in enumerate(scalings_for(cfg))}
    table = read_trial_table(folder, "eval").drop("trial_id")
    rows = table.filter(pl.col("mode").is_null()).drop("mode", "protocol").to_dicts()
    rows.sort(key=lambda r: (r["finetune_steps"] > 0, order.get((r["method"], r["factor"]), 0)))
    model = None
    if status == "done":
        model = load_model(folder / MODEL_FILE, make_model(cfg))
    return TrialOutcome(
        config=cfg,
        status=status,
        history=history,
        eval_rows=rows,
        summary=extrapolation_summary(rows, cfg.train.length, cfg.eval.accuracy_threshold),
        model=model,
        n_params=train["n_params"],
        tokens_seen=train["tokens_seen"],
        wall_time_s=sum(r.get("wall_time_s", 0.0) for r in stages),
        train_time_s=train["train_time_s"],
        folder=folder if keep else None,
        stages=stages,
    )

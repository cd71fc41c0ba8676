"""Training a lazy twin to a target in-range loss (`train.match`, `MatchConfig`).

A twin trained for its network's steps ends far above the network's loss at L_train, so its
rise past L_train compares an almost untrained function with a trained one. A matched trial
instead searches: for each factor of `train.match.lr_factors` in turn, the twin trains from
initialisation at factor x `train.lr` for up to `max_steps_factor` x `train.steps` steps (its
own warmup-cosine schedule over that many), and every `measure_every` steps (default
`train.log_every`) its in-range loss is measured (`in_range_loss`: the eval stage's batches
at L_train, so it equals the eval table's loss at 1x of the model kept). A factor's run ends
at its first measurement <= target + `tolerance` (training further only moves away) and keeps
its measurement closest to the target; the search ends at the first factor whose kept loss is
within `tolerance` of the target (reached), else it keeps the closest over all factors. The
kept model is the trial's `model.eqx`, which every later stage evaluates.

The target is a loss in nats, or `network`: the in-range loss of the rich sibling
(`rope_lab.trial.config.rich_sibling`) measured the same way from its `model.eqx`, which must
exist in the run (a sweep trains it first; without it the trial fails saying so).

Resuming: each finished factor's outcome is written to `match/search.json` and the best model so
far to `match/best.eqx`; an interrupted search resumes at the next factor (a factor cut short
runs again from its start).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from rope_lab.config import TrialConfig
from rope_lab.hooks import Hook, StepState
from rope_lab.model.factory import make_model
from rope_lab.results import trial_dir
from rope_lab.runtime.atomic import atomic_write_text
from rope_lab.tasks import Task
from rope_lab.trial.checkpoint import load_model, save_model
from rope_lab.trial.config import rich_sibling
from rope_lab.trial.evaluate import draw_batches, metric_sums, model_at_length
from rope_lab.trial.scaling_plan import position_sets, scalings_for
from rope_lab.trial.stage_files import MODEL_FILE
from rope_lab.trial.train import TrainResult, train
from rope_lab.typed import ConfigError

SEARCH_DIR = "match"
SEARCH_FILE = "search.json"
BEST_FILE = "best.eqx"


class SiblingMissing(ConfigError):
    """`train.match.target: network` and the rich sibling has no trained model in the run."""


@dataclass
class Outcome:
    """One lr factor's run: its lr, the step and in-range loss of its measurement closest to the
    target, whether that is within the tolerance of it (reached), its measurements (step,
    loss) and its train rows up to the kept step."""

    factor: float
    lr: float
    steps: int
    loss: float
    reached: bool
    measured: list[tuple[int, float]] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)


def in_range_loss(model: Any, task: Task, cfg: TrialConfig) -> float:
    """Mean loss (nats per scored token) of `model` on the eval stage's batches at L_train, as
    trained: the whole-sequence loss of the eval table's 1x row (inf when not finite)."""
    length = cfg.train.length
    trained = scalings_for(cfg)[0]
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.eval.seed), length)
    drawn = draw_batches(task, cfg, length, key=key, sets=position_sets(cfg, trained))
    sums = metric_sums(model_at_length(model, cfg, trained, length), drawn)
    loss = float(sums["loss_sum"].sum() / max(float(sums["count"].sum()), 1.0))
    return loss if math.isfinite(loss) else math.inf


def target_loss(cfg: TrialConfig, task: Task, run_dir: Path) -> float:
    """The loss `train.match.target` names: the number itself, or the rich sibling's
    `in_range_loss` from its `model.eqx` in `run_dir` (SiblingMissing when there is none)."""
    target = cfg.train.match.target
    if not isinstance(target, str):
        return float(target)  # type: ignore[arg-type]
    sibling = rich_sibling(cfg)
    path = trial_dir(run_dir, sibling.trial_id) / MODEL_FILE
    if not path.is_file():
        raise SiblingMissing(
            f"train.match.target: network: the rich sibling {sibling.trial_id} has no "
            f"{MODEL_FILE} in {run_dir} (not trained yet, diverged or failed)"
        )
    return in_range_loss(load_model(path, make_model(sibling)), task, sibling)


def _copy(model: Any) -> Any:
    """`model` with its arrays copied (the train step donates the buffers it was given)."""
    return jax.tree.map(lambda x: jnp.array(x, copy=True) if eqx.is_array(x) else x, model)


def _read(folder: Path) -> tuple[list[Outcome], float | None]:
    path = folder / SEARCH_DIR / SEARCH_FILE
    if not path.is_file():
        return [], None
    data = json.loads(path.read_text())
    outcomes = [Outcome(**o) for o in data["outcomes"]]
    for o in outcomes:
        o.measured = [(int(s), float(x)) for s, x in o.measured]
    return outcomes, data["target"]


def _write(folder: Path, outcomes: list[Outcome], target: float) -> None:
    data = {"target": target, "outcomes": [asdict(o) for o in outcomes]}
    atomic_write_text(folder / SEARCH_DIR / SEARCH_FILE, json.dumps(data))


def _best(outcomes: list[Outcome], target: float) -> Outcome:
    """The reached outcome (the search stops at it), else the one closest to `target` (the
    first on ties)."""
    return next((o for o in outcomes if o.reached), min(outcomes, key=lambda o: _gap(o, target)))


def _gap(outcome: Outcome, target: float) -> float:
    return abs(outcome.loss - target)


def _run_factor(
    cfg: TrialConfig, task: Task, factor: float, target: float
) -> tuple[Outcome, Any, TrainResult]:
    """Train the twin from initialisation at `factor` x lr, measuring every log_every steps,
    until a measurement is <= target + tolerance or its steps end; its outcome and the model of
    its measurement closest to the target."""
    tr, match = cfg.train, cfg.train.match
    total = max(tr.steps, math.ceil(match.max_steps_factor * tr.steps))
    lr = factor * tr.lr
    found = Outcome(factor, lr, 0, math.inf, False)
    kept: dict[str, Any] = {}

    def measure(state: StepState) -> None:
        loss = in_range_loss(state.model, task, cfg)
        found.measured.append((state.step, loss))
        if abs(loss - target) < _gap(found, target):
            found.steps, found.loss = state.step, loss
            kept["model"] = _copy(state.model)
        found.reached = _gap(found, target) <= match.tolerance

    def done(_: int) -> bool:
        return bool(found.measured) and found.measured[-1][1] <= target + match.tolerance

    hook = Hook(every=match.every(tr.log_every), fn=measure)
    result = train(cfg, steps=total, lr=lr, hooks=[hook], stop=done)
    found.history = [r for r in result.history if r["step"] <= found.steps]
    return found, kept.get("model"), result


def search(cfg: TrialConfig, task: Task, run_dir: Path) -> tuple[Any, Outcome, float]:
    """(the kept model, its outcome, the target) of the matched trial `cfg` (module docstring),
    resuming from the factors `match/search.json` records."""
    folder = trial_dir(run_dir, cfg.trial_id)
    (folder / SEARCH_DIR).mkdir(parents=True, exist_ok=True)
    outcomes, target = _read(folder)
    if target is None:
        target = target_loss(cfg, task, run_dir)
    best_path = folder / SEARCH_DIR / BEST_FILE
    for factor in cfg.train.match.lr_factors[len(outcomes) :]:
        if any(o.reached for o in outcomes):
            break
        outcome, model, _ = _run_factor(cfg, task, factor, target)
        if model is not None and (
            not outcomes or _gap(outcome, target) < _gap(_best(outcomes, target), target)
        ):
            save_model(best_path, model)
        outcomes.append(outcome)
        _write(folder, outcomes, target)
    chosen = _best(outcomes, target)
    if not best_path.is_file():
        raise RuntimeError("train.match: no finite in-range loss at any lr factor")
    return load_model(best_path, make_model(cfg)), chosen, target


def match_columns(outcome: Outcome, target: float) -> dict[str, Any]:
    """The trials-row columns of a matched trial: target, reached loss, chosen lr and steps,
    and whether the loss is within the tolerance of the target."""
    return {
        "match_target": target,
        "match_loss": outcome.loss,
        "match_lr": outcome.lr,
        "match_steps": outcome.steps,
        "match_reached": outcome.reached,
    }


__all__ = [
    "Outcome",
    "SiblingMissing",
    "in_range_loss",
    "match_columns",
    "search",
    "target_loss",
]

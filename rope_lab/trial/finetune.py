"""Fine-tuned extension: a RoPE model fine-tuned a few steps at factor x L_train under each
scaling chosen for fine-tuning (`scaling_plan.finetune_scalings`), then evaluated at every
length (`rope_lab.trial.evaluate.evaluate_model`); its rows carry `finetune_steps`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rope_lab.config import TrialConfig
from rope_lab.model.transformer import Transformer
from rope_lab.tasks import Task
from rope_lab.trial.evaluate import evaluate_model, model_at_length
from rope_lab.trial.scaling_plan import Scaling, fine_tuned, finetune_length, finetune_scalings
from rope_lab.trial.train import train


def finetune_and_evaluate(
    model: Transformer,
    task: Task,
    cfg: TrialConfig,
    *,
    step: int,
    scalings: Iterable[Scaling] | None = None,
) -> list[dict]:
    """For each (method, factor) of a RoPE model (default: `finetune_scalings`, those of the
    eval config chosen for fine-tuning): fine-tune `eval.finetune_steps` steps at factor x
    L_train (`scaling_plan.finetune_length`: L_train for DroPE) with that scaling, then
    evaluate at every length. Empty when finetune_steps is 0 or the model is not RoPE;
    scalings not chosen (`scaling_plan.fine_tuned`: zero-shot only, like the temperature, or
    outside `eval.finetune_methods` / `finetune_factors`) are skipped."""
    ev = cfg.eval
    if ev.finetune_steps <= 0 or not cfg.model.supports_scaling:
        return []
    rows: list[dict] = []
    todo = (
        finetune_scalings(cfg) if scalings is None else [s for s in scalings if fine_tuned(cfg, s)]
    )
    for scaling in todo:
        target = finetune_length(cfg, scaling)
        tuned = train(
            cfg,
            model=model_at_length(model, cfg, scaling, target),
            length=target,
            steps=ev.finetune_steps,
            lr=ev.finetune_lr,
            data_seed=cfg.train.seed + 10_000,
        )
        rows += evaluate_model(
            tuned.model, task, cfg, step=step, scalings=[scaling], finetune_steps=ev.finetune_steps
        )
    return rows


__all__ = ["finetune_and_evaluate"]

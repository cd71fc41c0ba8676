"""Which scalings a trial is evaluated under: the one place that decides it.

A scaling is a zero-shot change of the trained model at evaluation: a RoPE scaling method at a
factor, or the log-length attention temperature (`TEMPERATURE`, any encoding, factor 1: its
multiplier max(1, log L / log L_train) follows from the evaluated length). Evaluation, the
sweep's scaling stages and its cost plan all ask `scalings_for`; fine-tuning asks
`finetune_scalings`. Plain data only (no JAX), so the sweep driver can plan stages without
importing the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.config import TrialConfig

NO_SCALING = "none"  # method of the rows of an encoding that has no scalings
TEMPERATURE = "temperature"  # method of the rows under the zero-shot log-length temperature


@dataclass(frozen=True)
class Scaling:
    """A scaling applied at evaluation (a RoPE method, or `TEMPERATURE`): method, factor, extra
    parameters (as pairs)."""

    method: str
    factor: float
    params: tuple = ()


def scalings_for(cfg: TrialConfig) -> list[Scaling]:
    """The as-trained entry first (the training-time scaling of an encoding that
    `supports_scaling`, i.e. RoPE, else `NO_SCALING`), then every RoPE (method, factor) of the
    eval config, then `TEMPERATURE` at factor 1 when `eval.zero_shot_temperature` is set."""
    out = _rope_scalings(cfg)
    if cfg.eval.zero_shot_temperature:
        out.append(Scaling(TEMPERATURE, 1.0))
    return out


def _rope_scalings(cfg: TrialConfig) -> list[Scaling]:
    """The as-trained entry, then the eval config's RoPE scalings (none for other encodings)."""
    if not cfg.model.supports_scaling:
        return [Scaling(NO_SCALING, 1.0)]
    pos = cfg.model.scaled_position
    out = [Scaling(pos.rope.scaling, pos.rope.factor, pos.rope.params)]
    for method in cfg.eval.methods:
        for factor in cfg.eval.factors:
            candidate = eval_scaling(cfg, method, factor)
            if candidate not in out:
                out.append(candidate)
    return out


def eval_scaling(cfg: TrialConfig, method: str, factor: float) -> Scaling:
    """One scaling method of the eval config at `factor`, with its (frozen) parameters."""
    return Scaling(method, factor, dict(cfg.eval.method_params).get(method, ()))


def scaling_stages(cfg: TrialConfig) -> list[tuple[str, float]]:
    """(method, factor) pairs evaluated after training, each as its own sweep stage."""
    return [(s.method, s.factor) for s in scalings_for(cfg)[1:]]


def fine_tunable(scaling: Scaling) -> bool:
    """Whether a scaling stage also fine-tunes under its scaling (RoPE methods; the temperature
    is zero-shot only)."""
    return scaling.method not in (NO_SCALING, TEMPERATURE)


def finetune_scalings(cfg: TrialConfig) -> list[Scaling]:
    """The stages' scalings fine-tuned at factor x L_train when `eval.finetune_steps` > 0: the
    RoPE ones of an encoding that `supports_scaling`, else none."""
    if not cfg.model.supports_scaling:
        return []
    return [s for s in scalings_for(cfg)[1:] if fine_tunable(s)]

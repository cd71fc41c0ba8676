"""Which scalings a trial is evaluated under: the one place that decides it.

A scaling is a zero-shot change of the trained model at evaluation: a RoPE scaling method at a
factor, or the log-length attention temperature (`TEMPERATURE`, any encoding, factor 1: its
multiplier max(1, log L / log L_train) follows from the evaluated length). Evaluation, the
sweep's scaling stages and its cost plan all ask `scalings_for`; fine-tuning asks
`finetune_scalings`. Plain data only (no JAX), so the sweep driver can plan stages without
importing the model.
"""

from __future__ import annotations

import math
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
    `supports_scaling`, i.e. the rotary family, else `NO_SCALING`), then every scaling
    (method, factor) of the eval config, then `TEMPERATURE` at factor 1 when
    `eval.zero_shot_temperature` is set."""
    out = _rope_scalings(cfg)
    if cfg.eval.zero_shot_temperature:
        out.append(Scaling(TEMPERATURE, 1.0))
    return out


def _rope_scalings(cfg: TrialConfig) -> list[Scaling]:
    """The as-trained entry, then the eval config's RoPE scalings (none for other encodings)."""
    if not cfg.model.supports_scaling:
        return [Scaling(NO_SCALING, 1.0)]
    trained = Scaling(*cfg.model.scaled_position.options.trained_scaling())
    out = [trained]
    for method in cfg.eval.methods:
        for factor in cfg.eval.factors:
            candidate = eval_scaling(cfg, method, factor)
            if candidate in out or (
                same_frequencies(trained, candidate) and not fine_tuned(cfg, candidate)
            ):
                continue
            out.append(candidate)
    return out


def same_frequencies(trained: Scaling, scaling: Scaling) -> bool:
    """Whether ``scaling`` leaves the trained RoPE as it is: unscaled (`default`, whose factor
    is only the fine-tuning target) on a model trained unscaled. Its zero-shot rows would
    repeat the model as trained, so such a stage exists only to fine-tune (the control of
    the extension methods) and evaluates nothing zero-shot."""
    return scaling.method == "default" and trained.method == "default"


def eval_scaling(cfg: TrialConfig, method: str, factor: float) -> Scaling:
    """One scaling method of the eval config at `factor`, with its (frozen) parameters; at
    factor 1 for a method that recalibrates at the training length (the factor changes
    nothing, so one stage stands for every factor)."""
    if _recalibrates_at_train_length(method):
        factor = 1.0
    return Scaling(method, factor, dict(cfg.eval.method_params).get(method, ()))


def _recalibrates_at_train_length(method: str) -> bool:
    from rope_lab.registry import SCALINGS  # JAX-free: scaling configs are plain data

    return method in SCALINGS and SCALINGS[method].recalibrates_at_train_length


def finetune_length(cfg: TrialConfig, scaling: Scaling) -> int:
    """The length a stage fine-tunes at: factor x L_train, or L_train for a method that
    recalibrates at the training length (DroPE)."""
    if _recalibrates_at_train_length(scaling.method):
        return cfg.train.length
    return round(scaling.factor * cfg.train.length)


def position_sets(cfg: TrialConfig, scaling: Scaling) -> int:
    """S, the position sets a stage under `scaling` scores each query-key pair in: a
    relative-position remap's (`scalings/remaps.py`) on a model it applies to, else 1 (the memory
    and FLOPs it costs grow with S)."""
    from rope_lab.model.scalings.remaps import position_set_count
    from rope_lab.registry import SCALINGS

    if not cfg.model.supports_scaling or scaling.method not in SCALINGS:
        return 1
    return position_set_count(scaling.method, scaling.factor, cfg.train.length, scaling.params)


def scaling_stages(cfg: TrialConfig) -> list[tuple[str, float]]:
    """(method, factor) pairs evaluated after training, each as its own sweep stage."""
    return [(s.method, s.factor) for s in scalings_for(cfg)[1:]]


def fine_tunable(scaling: Scaling) -> bool:
    """Whether a scaling stage also fine-tunes under its scaling (RoPE methods; the temperature
    is zero-shot only)."""
    return scaling.method not in (NO_SCALING, TEMPERATURE)


def fine_tuned(cfg: TrialConfig, scaling: Scaling) -> bool:
    """Whether the stage of `scaling` fine-tunes: `eval.finetune_steps` > 0, a RoPE method of an
    encoding that `supports_scaling`, and among `eval.finetune_methods` / `finetune_factors`
    when those are given."""
    ev = cfg.eval
    return (
        ev.finetune_steps > 0
        and cfg.model.supports_scaling
        and fine_tunable(scaling)
        and (not ev.finetune_methods or scaling.method in ev.finetune_methods)
        and (not ev.finetune_factors or scaling.factor in ev.finetune_factors)
    )


def finetune_scalings(cfg: TrialConfig) -> list[Scaling]:
    """The stages' scalings fine-tuned at factor x L_train (see `fine_tuned`)."""
    return [s for s in scalings_for(cfg)[1:] if fine_tuned(cfg, s)]


def log_length_temperature(length: int, train_length: int) -> float:
    """max(1, log L / log L_train): the logit multiplier of `TEMPERATURE` at length L, which keeps
    attention entropy roughly constant past the training length (1 at and below it)."""
    if length <= train_length or train_length < 2:
        return 1.0
    return math.log(length) / math.log(train_length)

"""Which RoPE scalings a trial is evaluated under: the one place that decides it.

Evaluation, the sweep's scaling stages and its cost plan all ask `scalings_for`. Plain data
only (no JAX), so the sweep driver can plan stages without importing the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.config import TrialConfig

NO_SCALING = "none"  # method of the rows of an encoding that has no scalings


@dataclass(frozen=True)
class Scaling:
    """A RoPE scaling applied at evaluation: method, factor, extra parameters (as pairs)."""

    method: str
    factor: float
    params: tuple = ()


def scalings_for(cfg: TrialConfig) -> list[Scaling]:
    """The training-time scaling first, then every (method, factor) of the eval config, for an
    encoding that `supports_scaling` (RoPE); else one as-trained entry (`NO_SCALING`)."""
    pos = cfg.model.position
    if not pos.options.supports_scaling:
        return [Scaling(NO_SCALING, 1.0)]
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

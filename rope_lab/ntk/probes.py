"""The fixed probe sets of a trial's NTK tracking, its readout direction and the alignment
targets: drawn once per trial (seeded by `ntk.seed`) and reused at every NTK step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import equinox as eqx
import jax
import numpy as np

from rope_lab.config import TrialConfig
from rope_lab.runtime.xla_options import FEW_CALLS
from rope_lab.tasks import Task


@dataclass
class ProbeSets:
    """Fixed probes: short (N, L_train) tokens and targets/masks, long[L] tokens."""

    short: np.ndarray
    short_targets: np.ndarray
    short_mask: np.ndarray
    long: dict[int, np.ndarray]


def draw_probes(cfg: TrialConfig, task: Task, *, with_long: bool = True) -> ProbeSets:
    """Probe sets of a trial, drawn once with `ntk.seed` from its task's eval split (`with_long`
    False: the short set only, the same draw, with `long` empty)."""
    key = jax.random.PRNGKey(cfg.ntk.seed)
    n, length = cfg.ntk.probes, cfg.train.length
    operands = task.operands("eval")
    # one program per length, not one per eager op; the operands are arguments, not constants
    sample = eqx.filter_jit(task.sample_from, compiler_options=FEW_CALLS)  # type: ignore[call-overload]
    short = sample(operands, n, length, key=jax.random.fold_in(key, length))
    long = {
        L: np.asarray(sample(operands, n, L, key=jax.random.fold_in(key, L)).tokens)
        for L in (cfg.ntk_lengths if with_long else ())
    }
    return ProbeSets(
        np.asarray(short.tokens), np.asarray(short.targets), np.asarray(short.mask), long
    )


def readout(cfg: TrialConfig) -> str | jax.Array:
    """The `output` argument of the kernels: a fixed Gaussian u (V,), "trace" or "target"."""
    if cfg.ntk.output == "random":
        return jax.random.normal(jax.random.PRNGKey(cfg.ntk.seed + 1), (cfg.task.vocab_size,))
    return cfg.ntk.output


def target_values(cfg: TrialConfig, probes: ProbeSets, output) -> np.ndarray | None:
    """y (N,) for kernel-target alignment: the readout of a perfect model on each short probe
    (None for the "trace" and "target" outputs)."""
    if isinstance(output, str):
        return None
    u = np.asarray(output) / math.sqrt(cfg.task.vocab_size)
    return (u[probes.short_targets] * probes.short_mask).sum(axis=1)


__all__ = ["ProbeSets", "draw_probes", "readout", "target_values"]

"""What a trial's empirical-NTK tracking computes: its steps and its gradient passes.

Plain data only (no JAX), so the sweep plan can count the tracking's cost without importing the
model; `rope_lab.ntk.tracking` runs exactly this schedule (`ntk_steps` is its step list). Each
`GradientPass` is one call of `rope_lab.ntk.kernels.gradient_features`: per sequence one forward
pass and
`rows` x C backward passes (C = V for `ntk.output` "trace", else 1), sequences padded up to a
whole number of chunks of `ntk.chunk_size`; with `ntk.pad_to_longest` every call runs at the
longest probe length with 2 mask rows (`NTKTracker._features`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rope_lab.config import TrialConfig
from rope_lab.trial.scaling_plan import Scaling, fine_tunable, scalings_for


def ntk_steps(cfg: TrialConfig) -> tuple[int, ...]:
    """Configured NTK steps, or 0, 1, 2, 4, ... below train.steps, plus the last step."""
    if cfg.ntk.steps:
        return tuple(sorted(set(cfg.ntk.steps)))
    last = cfg.train.steps
    steps = {0, last}
    s = 1
    while s < last:
        steps.add(s)
        s *= 2
    return tuple(sorted(steps))


@dataclass(frozen=True)
class GradientPass:
    """`count` calls, each of per-example gradients of `sequences` sequences (chunk padding
    included) of `length` tokens with `rows` output masks each; `what` names the measurement."""

    what: str
    sequences: int
    length: int
    rows: int
    count: int = 1


def gradient_passes(cfg: TrialConfig) -> list[GradientPass]:
    """The gradient passes of a trial's NTK tracking (none when `ntk.enabled` is off).

    At every NTK step reached in training (`ntk_steps` up to train.steps): the short probes
    (`probes` sequences at L_train, 1 row) and each long probe set (`probes` at each of
    `cfg.ntk_lengths`, 2 rows: whole and tail). Shift invariance at step 0 and the last step:
    one more pass over the short probes (positions moved). At the last step, for a RoPE model,
    each scaling stage that `measures_under` its scaling: its short and long passes again; and
    the position
    kernels: each of min(`position_probes`, `probes`) probes once per block of `rows` positions
    (rows 2 with `pad_to_longest`, else 1) at L_train, and per 2 positions at the longest probe
    length.
    """
    ntk = cfg.ntk
    if not ntk.enabled:
        return []
    L, longs, n = cfg.train.length, cfg.ntk_lengths, ntk.probes
    longest = max((L, *longs))
    steps = [s for s in ntk_steps(cfg) if 0 <= s <= cfg.train.steps]
    last = cfg.train.steps in steps

    def call(what: str, sequences: int, length: int, rows: int, count: int = 1) -> GradientPass:
        chunk = min(ntk.chunk_size, sequences)
        padded = math.ceil(sequences / chunk) * chunk
        if ntk.pad_to_longest:
            length, rows = longest, 2
        return GradientPass(what, padded, length, rows, count)

    def kernels(what: str, count: int) -> list[GradientPass]:
        return [call(what, n, L, 1, count), *(call(what, n, x, 2, count) for x in longs)]

    passes = kernels("kernels", len(steps))
    shifted = sum(1 for s in {0, cfg.train.steps} if s in steps)
    if shifted:
        passes.append(call("shift invariance", n, L, 1, shifted))
    scaled = sum(1 for s in scalings_for(cfg)[1:] if measures_under(cfg, s))
    if scaled:
        passes += kernels("RoPE scalings", scaled)
    if last:
        m = min(ntk.position_probes, n)
        rows = 2 if ntk.pad_to_longest else 1
        passes.append(call("position kernels", m * math.ceil(L / rows), L, rows))
        if longs:
            passes.append(call("position kernels", m * math.ceil(max(longs) / 2), max(longs), 2))
    return passes


def measures_under(cfg: TrialConfig, scaling: Scaling) -> bool:
    """Whether the stage of `scaling` measures K_cross under it: NTK tracking on, its last
    step tracked, a RoPE model and a RoPE method (not the temperature)."""
    return (
        cfg.ntk.enabled
        and cfg.train.steps in ntk_steps(cfg)
        and cfg.model.supports_scaling
        and fine_tunable(scaling)
    )


def outputs_per_row(cfg: TrialConfig) -> int:
    """C: outputs per mask row (the vocabulary for `ntk.output` "trace", else 1)."""
    return cfg.task.vocab_size if cfg.ntk.output == "trace" else 1


__all__ = ["GradientPass", "gradient_passes", "ntk_steps", "outputs_per_row"]

"""What a sweep spec writes that some or all of its trials do not use, found before any work.

- A setting a trial mapping writes and its trial does not use (`config.unused_settings`): an
  encoding's block its kind does not select (`model.position.rope` under `kind: alibi`), a
  RoPE evaluation key (`eval.methods`, ...) on an encoding without RoPE scalings.
- The `scaling` block, on the trials whose encoding has no RoPE scalings (`apply_scaling`
  clears their evaluation stages), and a base key the block also sets (the block wins).
- A relative-position remap (`scalings/remaps.py`) whose exact span covers every evaluated
  length (`PositionSets.exact_below`): its rows repeat the model as trained.

Used by no trial, a setting is an error naming its key and why; used by some (a grid that
mixes encodings), a warning line naming the trials' kinds that skip it, which `sweep plan` and
`sweep run` print. A remap inactive at every length is a warning: its stage is still valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from rope_lab.config import TrialConfig, no_scalings, replace, unused_settings
from rope_lab.sweep.plain import lookup
from rope_lab.trial.config import SCALING_KEYS


def apply_scaling(cfg: TrialConfig, scaling: Any) -> TrialConfig:
    """Set the eval stages of a trial whose encoding `supports_scaling` (RoPE) from the
    `scaling` block (a `spec.ScalingSpec`, or None: unchanged); clear them (no scalings) for
    any other encoding."""
    if scaling is None:
        return cfg
    if not cfg.model.supports_scaling:
        cleared = {"eval.methods": (), "eval.factors": (), "eval.finetune_steps": 0}
        cleared |= {"eval.finetune_methods": (), "eval.finetune_factors": ()}
        return replace(cfg, **cleared)
    changes = {f"eval.{f.name}": getattr(scaling, f.name) for f in dataclasses.fields(scaling)}
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})


def scaling_overlaps(base: Mapping, scaling: Any) -> list[str]:
    """Errors for each key the `base` sets that the `scaling` block sets too."""
    return [
        f"base.{key}: set by the `scaling` block too; remove one of the two"
        for key in SCALING_KEYS
        if lookup(base, key) is not None and getattr(scaling, key[5:]) is not None
    ]


@dataclasses.dataclass
class Unused:
    """Tally, over a spec's expanded trials, of the settings each does not use."""

    trials: set[str] = dataclasses.field(default_factory=set)  # ids
    # key -> why -> value -> ids of the trials that skip it
    skipped: dict[str, dict[str, dict[str, set[str]]]] = dataclasses.field(default_factory=dict)

    def add(self, data: Mapping, cfg: TrialConfig) -> None:
        """One expanded trial: its mapping as written (base and axis values) and its
        validated config."""
        self.trials.add(cfg.trial_id)
        unused = unused_settings(data, cfg)
        if not cfg.model.supports_scaling:
            unused.append(("scaling", *no_scalings(cfg)))
        for key, why, value in unused:
            values = self.skipped.setdefault(key, {}).setdefault(why, {})
            values.setdefault(repr(value), set()).add(cfg.trial_id)

    def errors(self, has_scaling: bool) -> list[str]:
        """The settings no trial uses."""
        return [
            f"{key}: used by no trial, because {because}; remove it"
            for key, because, n in self._skipped(has_scaling, counts=False)
            if n == len(self.trials)
        ]

    def warnings(self, has_scaling: bool) -> list[str]:
        """The settings some trials use and others skip, and why (with how many trials)."""
        return [
            f"{key}: skipped by {n} of {len(self.trials)} trials, because {because}"
            for key, because, n in self._skipped(has_scaling, counts=True)
            if n < len(self.trials)
        ]

    def _skipped(self, has_scaling: bool, counts: bool) -> Iterable[tuple[str, str, int]]:
        """(key, the reasons as text, trials skipping it) of each skipped setting."""
        for key, whys in self.skipped.items():
            if key == "scaling" and not has_scaling:
                continue
            reasons = []
            for why, values in whys.items():
                listed = [v + (f" ({len(ids)})" if counts else "") for v, ids in values.items()]
                reasons.append(f"{why} {', '.join(listed)}")
            ids = set().union(*(i for values in whys.values() for i in values.values()))
            yield key, "; ".join(reasons), len(ids)


def inactive_remaps(trials: Iterable[TrialConfig]) -> list[str]:
    """A warning for each remap stage (method, factor, span) that changes no position at any
    evaluated length of the trials it runs in."""
    from rope_lab.registry import SCALINGS
    from rope_lab.trial.scaling_plan import scalings_for

    found: dict[tuple[str, float, str, int, int], int] = {}
    for cfg in trials:
        longest = max(cfg.eval_lengths)
        for s in scalings_for(cfg)[1:]:
            if s.method not in SCALINGS or not SCALINGS[s.method].remaps:
                continue
            sets = SCALINGS[s.method](**dict(s.params)).rule(s.factor, cfg.train.length)
            if longest <= sets.exact_below:
                key = (s.method, s.factor, sets.exact_below_name, sets.exact_below, longest)
                found[key] = found.get(key, 0) + 1
    return [
        f"eval.methods: {method} at factor {factor:g} is inactive at every evaluated length "
        f"of {n} trial{'s' * (n > 1)} ({name} {span} >= the longest length {longest}): its "
        "rows repeat the model as trained"
        for (method, factor, name, span, longest), n in found.items()
    ]

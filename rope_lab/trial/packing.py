"""Packed seeds: which trials of a sweep train together as one vmapped program (the sweep spec's
`pack_seeds: true`). Plain data, no JAX.

Trials whose training sections (`trial.ids.TRAINING_SECTIONS`: model, task, train, ntk; and
the position table's length) are equal but for their `SEED_FIELDS` train as one k-seed ensemble
(`rope_lab.trial.ensemble.train_packed`) in one task (`rope_lab.trial.pipeline.run_pack_train`):
one compiled step updates every member, and each member keeps its own folder, checkpoints,
train and NTK rows, model file and `done.json`, so its evaluation stages, resumption and
tables are those of the trial trained alone. `train.seed` draws both the initialisation and the
data stream (`fold_in(PRNGKey(seed), 0 | 1)`); `ntk.seed` draws the NTK probes, measured per
member. The eval section is not compared: evaluation stages run per trial.

A host-fed task (`lm_tokens`) packs too: each step, every member's windows are gathered on the
host as the trial alone gathers them and fed to the program stacked along the seed axis.
A trial that cannot pack trains alone, with the reason (`unpackable`): the lazy regime (its
linearised twin is not vmapped), several devices or processes (`train.devices` > 1,
`train.shard_params`, `train.processes` > 1: a pack runs on one device of one process), or no
other trial differing only in its seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rope_lab.config import TrialConfig, to_dict
from rope_lab.trial.ids import TRAINING_SECTIONS

# The fields in which the members of a pack may differ (the trials' seeds).
SEED_FIELDS = ("train.seed", "ntk.seed")
ALONE = "no other trial differs from it only in " + " / ".join(SEED_FIELDS)
OFF = "pack_seeds is off"


def _training_data(cfg: TrialConfig) -> dict[str, Any]:
    """The training sections as plain data less the seed fields, plus the table length."""
    full = to_dict(cfg)
    data: dict[str, Any] = {section: dict(full[section]) for section in TRAINING_SECTIONS}
    for dotted in SEED_FIELDS:
        section, _, key = dotted.partition(".")
        data[section].pop(key, None)
    data["max_length"] = cfg.max_length
    return data


def pack_key(cfg: TrialConfig) -> str:
    """Equal for trials that may train as one packed program: a hash of `_training_data`
    (execution fields included: the members share one program)."""
    blob = json.dumps(_training_data(cfg), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def unpackable(cfg: TrialConfig) -> str | None:
    """Why `cfg` trains alone whatever the other trials are, or None."""
    tr = cfg.train
    if tr.regime != "rich":
        return f"train.regime {tr.regime} (the linearised twin is not packed)"
    if tr.devices is not None and tr.devices > 1:
        return f"train.devices {tr.devices} (a pack trains on one device)"
    if tr.shard_params:
        return "train.shard_params (a pack trains on one device)"
    if tr.processes > 1:
        return f"train.processes {tr.processes} (a pack trains in one process)"
    return None


def mismatch(cfgs: Sequence[TrialConfig]) -> str | None:
    """Why `cfgs` cannot train as one pack (None when they can): the first trial that cannot
    pack at all, or the keys in which two members differ beyond their seeds."""
    for cfg in cfgs:
        reason = unpackable(cfg)
        if reason is not None:
            return f"trial {cfg.trial_id}: {reason}"
    first = _flat(_training_data(cfgs[0])) if cfgs else {}
    for cfg in cfgs[1:]:
        other = _flat(_training_data(cfg))
        keys = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        if keys:
            return (
                f"trial {cfg.trial_id} differs from {cfgs[0].trial_id} in {', '.join(keys)}, "
                f"not only in {' / '.join(SEED_FIELDS)}"
            )
    return None


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: json.dumps(data, sort_keys=True, default=str)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else key))
    return out


@dataclass(frozen=True)
class Pack:
    """Trials that train together (`reason` None, two or more), or one trial that trains alone
    and why."""

    trials: tuple[TrialConfig, ...]
    reason: str | None = None

    @property
    def packed(self) -> bool:
        """Whether the trials train as one program."""
        return self.reason is None

    @property
    def seeds(self) -> list[int]:
        """The members' `train.seed`s, in order."""
        return [t.train.seed for t in self.trials]


def plan_packs(trials: Sequence[TrialConfig], enabled: bool = True) -> list[Pack]:
    """`trials` split into packs (members in the trials' order) and lone trials, ordered by
    their first trial's position in `trials`. Disabled: every trial alone (reason `OFF`)."""
    if not enabled:
        return [Pack((t,), OFF) for t in trials]
    groups: dict[str, list[TrialConfig]] = {}
    alone: dict[str, str] = {}
    order: list[tuple[str, str]] = []  # ("pack", key) or ("alone", trial id), first seen
    for t in trials:
        reason = unpackable(t)
        if reason is not None:
            alone[t.trial_id] = reason
            order.append(("alone", t.trial_id))
            continue
        key = pack_key(t)
        if key not in groups:
            order.append(("pack", key))
        groups.setdefault(key, []).append(t)
    by_id = {t.trial_id: t for t in trials}
    packs: list[Pack] = []
    for kind, name in order:
        if kind == "alone":
            packs.append(Pack((by_id[name],), alone[name]))
        elif len(groups[name]) > 1:
            packs.append(Pack(tuple(groups[name])))
        else:
            packs.append(Pack(tuple(groups[name]), ALONE))
    return packs


__all__ = [
    "ALONE",
    "OFF",
    "SEED_FIELDS",
    "Pack",
    "mismatch",
    "pack_key",
    "plan_packs",
    "unpackable",
]

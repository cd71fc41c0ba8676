"""A slice of a sweep (`sweep run --only KEY=VALUE`, `sweep plan --only`): the trials whose
varying axes take the given values. A slice runs into the sweep's own run directory under the
same trial ids, so running the rest later, or the whole spec, skips what the slice finished."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import yaml

from rope_lab.sweep.plain import canon
from rope_lab.sweep.spec import SweepSpec, axis_assignments
from rope_lab.typed import ConfigError

__all__ = ["parse_only", "slice_spec"]


def parse_only(items: Sequence[str]) -> dict[str, Any]:
    """``["task.name=lm_text", "train.seed=0"]`` -> {"task.name": "lm_text", "train.seed": 0}
    (each value read as YAML); ConfigError naming an item without "=" or a key given twice."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--only {item}: expected KEY=VALUE, e.g. task.name=lm_text")
        if key in out:
            raise ConfigError(f"--only {key}: given twice")
        out[key] = _number_or_text(yaml.safe_load(text))
    return out


def _number_or_text(value: Any) -> Any:
    """YAML 1.1 reads "3e-3" as text: a float where the text is one."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _key(value: Any) -> str:
    """What two axis values compare by: numbers by value (64 and 64.0 alike), the rest as
    canonical JSON."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(float(value))
    return canon(value)


def slice_spec(spec: SweepSpec, only: dict[str, Any]) -> SweepSpec:
    """`spec` with the trials whose axis `key` equals `value` for every item of `only`, in the
    spec's order; ConfigError (before any work) naming a key that is not one of the spec's
    axes, or a value no trial takes, with what is allowed."""
    if not only:
        return spec
    where = spec.source or spec.name
    for key, value in only.items():
        if key not in spec.axes:
            axes = ", ".join(spec.axes) or "none: every trial is the base"
            raise ConfigError(f"--only {key}: not an axis of {where}; its axes: {axes}")
        values = [axis_assignments(t, spec)[key] for t in spec.trials]
        taken = {_key(v): canon(v) for v in values}
        if _key(value) not in taken:
            raise ConfigError(
                f"--only {key}={value}: no trial of {where} takes it; it takes "
                + ", ".join(sorted(set(taken.values())))
            )
    wanted = {key: _key(value) for key, value in only.items()}
    kept = tuple(
        t
        for t in spec.trials
        if all(_key(axis_assignments(t, spec)[k]) == v for k, v in wanted.items())
    )
    if not kept:
        given = ", ".join(f"{k}={v}" for k, v in only.items())
        raise ConfigError(f"--only {given}: no trial of {where} takes all of these together")
    return dataclasses.replace(spec, trials=kept)

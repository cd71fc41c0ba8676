"""Sweep specs: a YAML file naming a base trial and the axes to vary, expanded into trials.

A spec has a `base` TrialConfig mapping; `grid` axes (dotted TrialConfig key -> list of values,
combined as a product); `zip` groups (keys that vary together, each group one product axis);
`exclude` rules (partial assignments; a trial matching every key of a rule is dropped); and a
`scaling` block that sets the RoPE evaluation stages (eval.methods / factors / finetune_steps) of
RoPE trials and clears them for every other PE, so scaling never multiplies non-RoPE trials.
A setting no trial uses is an error; one some trials skip, a warning (`sweep/unused.py`).
`pack_seeds: true` trains trials that differ only in their seeds as one vmapped program
(`rope_lab.trial.packing`), with the rows each writes alone. `tracking` names the trackers
that watch the trials live (`rope_lab.tracking.config`; never part of a trial id).
Everything is checked before any work; errors are `ConfigError`s that start with the file path.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rope_lab.config import (
    ConfigError,
    Params,
    TrialConfig,
    config_hash,
    dotted_fields,
    from_dict,
    replace,
    to_dict,
    unknown_key_message,
    validate,
    variant_tag,
)
from rope_lab.results.columns import flatten_config
from rope_lab.sweep.plain import canon, format_value, lookup, nest, set_dotted, unique
from rope_lab.sweep.unused import Unused, apply_scaling, inactive_remaps, scaling_overlaps
from rope_lab.tracking.config import TrackingConfig, tracking_errors
from rope_lab.trial.config import SCALING_KEYS
from rope_lab.trial.placement import DEFAULT_STRATEGY, strategy_error
from rope_lab.yaml_files import read_yaml

NAME_PATTERN = re.compile(r"[a-z0-9_-]+")
MAX_TRIAL_ERRORS = 5


@dataclass(frozen=True)
class Resources:
    """Ray resources requested by each trial. `num_gpus` below 1 shares a device: Ray packs
    1 / num_gpus trials on it and each JAX process preallocates only its share of the memory
    (`rope_lab.runtime.device_share`); above 1 it must be whole devices. `placement_strategy`:
    how Ray places the placement group of a trial trained as several processes, one of
    `placement.STRATEGIES` (PACK: as few nodes as hold it; SPREAD: one member per node)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    placement_strategy: str = DEFAULT_STRATEGY


@dataclass(frozen=True)
class ScalingSpec:
    """The `scaling` block; None keeps the base config's value."""

    methods: tuple[str, ...] | None = None
    factors: tuple[float, ...] | None = None
    finetune_steps: int | None = None
    finetune_methods: tuple[str, ...] | None = None
    finetune_factors: tuple[float, ...] | None = None


@dataclass(frozen=True)
class _SpecFile:
    """Top-level keys of a spec file (typed so that `from_dict` checks them)."""

    name: str | None = None
    description: str = ""
    base: dict | None = None
    grid: dict | None = None
    zip: list | None = None
    exclude: list | None = None
    scaling: ScalingSpec | None = None
    resources: Resources = Resources()
    max_retries: int = 1
    pack_seeds: bool = False
    tracking: TrackingConfig = TrackingConfig()


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: expanded, validated, deduplicated trials in deterministic order."""

    name: str
    description: str
    source: Path | None
    trials: tuple[TrialConfig, ...]
    resources: Resources
    max_retries: int
    axes: dict[str, tuple]  # varying keys -> their values, in axis order
    # train trials equal but for their seeds as one vmapped program (`rope_lab.trial.packing`)
    pack_seeds: bool = False
    warnings: tuple[str, ...] = ()  # settings some trials do not use (`sweep/unused.py`)
    tracking: TrackingConfig = TrackingConfig()  # live trackers (`rope_lab.tracking`)


@dataclass
class _Axis:
    """One product axis: a grid key, or a zip group of keys varying together."""

    label: str
    keys: tuple[str, ...]
    raw: list[tuple[Any, ...]]  # one tuple of values per point, as written
    plain: list[tuple[Any, ...]]  # the same, coerced like the TrialConfig field, as plain data


def load_spec(path: str | Path) -> SweepSpec:
    """Read, validate and expand a sweep YAML file."""
    path = Path(path)
    data = read_yaml(path)
    return parse_spec(data if data is not None else {}, source=path)


def parse_spec(data: Mapping, *, source: Path | None = None) -> SweepSpec:
    """Validate and expand a spec mapping; errors start with `source` (or 'sweep spec')."""
    where = str(source) if source is not None else "sweep spec"

    def fail(messages: list[str]) -> ConfigError:
        return ConfigError("\n".join(f"{where}: {m}" for m in messages))

    if not isinstance(data, Mapping):
        raise fail([f"expected a mapping at the top level, got {type(data).__name__}"])
    errors: list[str] = []
    fields: dict[str, Any] = {}
    for key, value in data.items():  # one key at a time, so that every bad key is reported
        try:
            fields[key] = getattr(from_dict(_SpecFile, {key: value}), key)
        except ConfigError as err:
            errors.append(str(err))
    top = _SpecFile(**fields)
    if top.name is None:
        errors.append("name: required (lowercase letters, digits, '_' and '-')")
    elif not NAME_PATTERN.fullmatch(top.name):
        errors.append(f"name: {top.name!r} is invalid; use lowercase letters, digits, '_', '-'")
    base = _check_base(top.base, errors)
    broken: set[str] = set()  # axis keys that failed to parse; exclude rules skip them
    axes = _parse_axes(top, errors, broken)
    _check_overlaps(axes, top.scaling is not None, errors)
    if top.scaling is not None:
        _check_scaling(top.scaling, errors)
        errors += scaling_overlaps(base, top.scaling)
    for key in ("num_cpus", "num_gpus"):
        if getattr(top.resources, key) < 0:
            errors.append(f"resources.{key}: must be >= 0, got {getattr(top.resources, key)!r}")
    strategy = strategy_error(top.resources.placement_strategy)
    errors += [strategy] if strategy else []
    gpus = top.resources.num_gpus
    if gpus > 1 and gpus != int(gpus):
        errors.append(
            f"resources.num_gpus: a share of one device (< 1) or whole devices, got {gpus!r}"
        )
    if top.max_retries < 0:
        errors.append(f"max_retries: must be >= 0, got {top.max_retries!r}")
    errors += tracking_errors(top.tracking)
    rules = _parse_excludes(top.exclude, axes, broken, errors)
    if errors:
        raise fail(errors)

    unused = Unused()
    trials, errors = _expand(top, base, axes, rules, unused)
    errors += [] if errors else unused.errors(top.scaling is not None)
    if errors:
        raise fail(errors)
    if not trials:
        raise fail(["the sweep has no trials left after exclude"])
    varying = {}
    plain = [to_dict(t) for t in trials]
    for key in (k for ax in axes for k in ax.keys):
        values = unique(lookup(d, key) for d in plain)
        if len(values) > 1:
            varying[key] = values
    return SweepSpec(
        name=top.name or "",
        description=top.description,
        source=source,
        trials=tuple(trials),
        resources=top.resources,
        max_retries=top.max_retries,
        axes=varying,
        pack_seeds=top.pack_seeds,
        tracking=top.tracking,
        warnings=(*unused.warnings(top.scaling is not None), *inactive_remaps(trials)),
    )


def axis_assignments(trial: TrialConfig, spec: SweepSpec) -> dict[str, Any]:
    """Values of the spec's varying axes for one trial, as plain data."""
    data = to_dict(trial)
    return {key: lookup(data, key) for key in spec.axes}


# ------------------------------------------------------------------------------ parsing


def _check_base(base: Any, errors: list[str]) -> dict:
    if base is None:
        return {}
    if not isinstance(base, Mapping):
        errors.append(f"base: expected a TrialConfig mapping, got {base!r}")
        return {}
    if "name" in base:
        errors.append("base.name: not allowed; every trial is named after the sweep")
    try:
        from_dict(TrialConfig, base, "base")
    except ConfigError as err:
        errors.append(str(err))
    return dict(base)


def _check_key(key: Any, section: str) -> str:
    """Raise ConfigError unless `key` is a dotted TrialConfig leaf (or a key inside params)."""
    key = str(key)
    fields = dotted_fields(TrialConfig)
    if key == "name":
        raise ConfigError(f"{section}.name: trials are named after the sweep; it cannot vary")
    if key in fields:
        return key
    for prefix, tp in fields.items():
        if tp == Params and key.startswith(f"{prefix}.") and key != f"{prefix}.":
            return key
    raise ConfigError(
        unknown_key_message(key, [k for k in fields if k != "name"], f"{section}.{key}")
    )


def _coerce(key: str, value: Any, section: str) -> Any:
    """`value` coerced and type-checked like the TrialConfig field `key`, as plain data.

    Parameters (`task.params`, ...) are checked against their variant when each expanded trial
    is validated: the variant (the task, say) may be set by another axis."""
    if _in_params(key):
        return value
    data = nest(key, value)
    if (tag := variant_tag(key)) is not None:  # e.g. model.position.kind for a RoPE field
        set_dotted(data, *tag)
    cfg = from_dict(TrialConfig, data, section)
    return lookup(to_dict(cfg), key)


def _in_params(key: str) -> bool:
    """Whether `key` is a `Params` field of TrialConfig or a key inside one."""
    fields = dotted_fields(TrialConfig)
    return any(tp == Params and (key == p or key.startswith(f"{p}.")) for p, tp in fields.items())


def _values(key: str, values: Any, section: str) -> tuple[list, list]:
    """Raw and coerced values of one axis key; raises ConfigError."""
    if not isinstance(values, list):
        raise ConfigError(f"{section}.{key}: expected a list of values, got {values!r}")
    if not values:
        raise ConfigError(f"{section}.{key}: empty list of values")
    return values, [_coerce(key, v, section) for v in values]


def _parse_axes(top: _SpecFile, errors: list[str], broken: set[str]) -> list[_Axis]:
    axes: list[_Axis] = []
    grid = top.grid or {}
    if not isinstance(grid, Mapping):
        errors.append(f"grid: expected a mapping of dotted key -> list of values, got {grid!r}")
        grid = {}
    for key, values in grid.items():
        try:
            key = _check_key(key, "grid")
            raw, plain = _values(key, values, "grid")
            axes.append(_Axis(f"grid.{key}", (key,), [(v,) for v in raw], [(p,) for p in plain]))
        except ConfigError as err:
            errors.append(str(err))
            broken.add(str(key))
    groups = top.zip or []
    if not isinstance(groups, list):
        errors.append(f"zip: expected a list of groups, got {groups!r}")
        groups = []
    for i, group in enumerate(groups):
        label = f"zip[{i}]"
        if not isinstance(group, Mapping) or not group:
            errors.append(f"{label}: expected a non-empty mapping of key -> list, got {group!r}")
            continue
        try:
            keys = tuple(_check_key(k, label) for k in group)
            columns = [_values(k, v, label) for k, v in zip(keys, group.values(), strict=True)]
        except ConfigError as err:
            errors.append(str(err))
            broken.update(map(str, group))
            continue
        lengths = {k: len(raw) for k, (raw, _) in zip(keys, columns, strict=True)}
        if len(set(lengths.values())) > 1:
            sizes = ", ".join(f"{k}: {n}" for k, n in lengths.items())
            errors.append(f"{label}: lists of unequal length ({sizes}); zipped keys vary together")
            broken.update(keys)
            continue
        raw = list(zip(*(c[0] for c in columns), strict=True))
        plain = list(zip(*(c[1] for c in columns), strict=True))
        axes.append(_Axis(label, keys, raw, plain))
    return axes


def _check_overlaps(axes: list[_Axis], has_scaling: bool, errors: list[str]) -> None:
    seen: dict[str, str] = {}
    for ax in axes:
        for key in ax.keys:
            where = f"{ax.label}.{key}" if ax.label.startswith("zip") else ax.label
            for other, other_where in seen.items():
                if key == other or key.startswith(f"{other}.") or other.startswith(f"{key}."):
                    errors.append(f"{where}: overlaps {other_where}; vary each key once")
            seen[key] = where
            if has_scaling and key in SCALING_KEYS:
                errors.append(f"{where}: set by the `scaling` block; remove one of the two")


def _check_scaling(scaling: ScalingSpec, errors: list[str]) -> None:
    from rope_lab.model.rope import ROPE_KINDS

    # `default` at factor s is unscaled RoPE; fine-tuned at s x L_train it is the control of
    # every extension method (fine-tuning alone, for the same steps)
    allowed = list(ROPE_KINDS)
    for i, method in enumerate(scaling.methods or ()):
        if method not in allowed:
            errors.append(
                f"scaling.methods[{i}]: unknown method {method!r}; allowed: {', '.join(allowed)}"
            )
    for i, factor in enumerate(scaling.factors or ()):
        if not factor >= 1:
            errors.append(f"scaling.factors[{i}]: factor must be >= 1, got {factor!r}")
    if scaling.finetune_steps is not None and scaling.finetune_steps < 0:
        errors.append(f"scaling.finetune_steps: must be >= 0, got {scaling.finetune_steps!r}")


def _parse_excludes(
    rules: Any, axes: list[_Axis], broken: set[str], errors: list[str]
) -> list[dict[str, str]]:
    """Each rule as {key: canonical value}; checks keys and that every value occurs."""
    if rules is None:
        return []
    if not isinstance(rules, list):
        errors.append(f"exclude: expected a list of partial assignments, got {rules!r}")
        return []
    axis_values = {k: [p[j] for p in ax.plain] for ax in axes for j, k in enumerate(ax.keys)}
    parsed = []
    for i, rule in enumerate(rules):
        label = f"exclude[{i}]"
        if not isinstance(rule, Mapping) or not rule:
            errors.append(f"{label}: expected a non-empty mapping of axis key -> value")
            continue
        canonical: dict[str, str] = {}
        for key, value in rule.items():
            key = str(key)
            if key in broken or (not axis_values and broken):
                continue
            if not axis_values:
                errors.append(f"{label}.{key}: there are no grid or zip keys to exclude on")
                continue
            if key not in axis_values:
                errors.append(unknown_key_message(key, list(axis_values), f"{label}.{key}"))
                continue
            try:
                plain = _coerce(key, value, label)
            except ConfigError as err:
                errors.append(str(err))
                continue
            if canon(plain) not in {canon(v) for v in axis_values[key]}:
                listed = ", ".join(format_value(v) for v in unique(axis_values[key]))
                errors.append(
                    f"{label}.{key}: {format_value(plain)} never occurs in the axis "
                    f"(values: {listed}), so the rule can never match"
                )
            canonical[key] = canon(plain)
        parsed.append(canonical)
    return parsed


# ---------------------------------------------------------------------------- expansion


def _expand(
    top: _SpecFile, base: dict, axes: list[_Axis], rules: list[dict[str, str]], unused: Unused
) -> tuple[list[TrialConfig], list[str]]:
    """Product of the axes minus excluded points, validated and deduplicated by trial_id."""
    trials: dict[str, TrialConfig] = {}
    errors: list[str] = []
    failed = 0
    matches = [0] * len(rules)
    for point in itertools.product(*(range(len(ax.raw)) for ax in axes)):
        raw: dict[str, Any] = {}
        plain: dict[str, Any] = {}
        for ax, i in zip(axes, point, strict=True):
            raw.update(zip(ax.keys, ax.raw[i], strict=True))
            plain.update(zip(ax.keys, ax.plain[i], strict=True))
        hit = [all(canon(plain[k]) == v for k, v in rule.items()) for rule in rules]
        for j, h in enumerate(hit):
            matches[j] += h
        if any(hit):
            continue
        data = copy.deepcopy(base)
        for key, value in raw.items():
            set_dotted(data, key, value)
        try:
            cfg = replace(from_dict(TrialConfig, data), name=top.name)
            cfg = validate(apply_scaling(cfg, top.scaling))
            unused.add(data, cfg)
        except ConfigError as err:
            failed += 1
            if failed <= MAX_TRIAL_ERRORS:
                errors.append(f"trial {format_value(plain)}: {err}")
            continue
        first = trials.setdefault(cfg.trial_id, cfg)
        if config_hash(first) != config_hash(cfg):
            errors.append(_shared_model_error(first, cfg, plain))
    if failed > MAX_TRIAL_ERRORS:
        errors.append(f"... and {failed - MAX_TRIAL_ERRORS} more trials fail validation")
    for j, n in enumerate(matches):
        if n == 0:
            errors.append(f"exclude[{j}]: matches no trial of the grid, so it can never apply")
    return list(trials.values()), errors


def _shared_model_error(first: TrialConfig, cfg: TrialConfig, plain: dict) -> str:
    """Why two grid points that train the same model cannot both be trials: a trial (its id
    names the trained model) has one evaluation."""
    a, b = flatten_config(first), flatten_config(cfg)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    differ = ", ".join(f"{k} ({format_value(a.get(k))} vs {format_value(b.get(k))})" for k in keys)
    return (
        f"trial {format_value(plain)}: trains the same model as another point (trial id "
        f"{cfg.trial_id}) and differs only in how it is evaluated: {differ}. A trial has one "
        "evaluation; sweep training settings, and evaluate a second way with a second spec of "
        "the same name (it runs only the new evaluation stages)"
    )


__all__ = ["Resources", "ScalingSpec", "SweepSpec", "axis_assignments", "load_spec", "parse_spec"]

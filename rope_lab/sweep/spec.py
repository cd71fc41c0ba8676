"""Sweep specs: a YAML file naming a base trial and the axes to vary, expanded into trials.

A spec has a `base` TrialConfig mapping; `grid` axes (dotted TrialConfig key -> list of values,
combined as a product); `zip` groups (keys that vary together, each group one product axis);
`exclude` rules (partial assignments; a trial matching every key of a rule is dropped); and a
`scaling` block that sets the RoPE evaluation stages (eval.methods / factors / finetune_steps) of
RoPE trials and clears them for every other PE, so scaling never multiplies non-RoPE trials.
Everything is checked before any work; errors are `ConfigError`s that start with the file path.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rope_lab.config import (
    ConfigError,
    Params,
    TrialConfig,
    dotted_fields,
    from_dict,
    replace,
    to_dict,
    unknown_key_message,
    validate,
)

NAME_PATTERN = re.compile(r"[a-z0-9_-]+")
SCALING_KEYS = ("eval.methods", "eval.factors", "eval.finetune_steps")
MAX_TRIAL_ERRORS = 5


@dataclass(frozen=True)
class Resources:
    """Ray resources requested by each trial."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0


@dataclass(frozen=True)
class ScalingSpec:
    """The `scaling` block; None keeps the base config's value."""

    methods: tuple[str, ...] | None = None
    factors: tuple[float, ...] | None = None
    finetune_steps: int | None = None


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
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read YAML: {err}") from None
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
    for f in dataclasses.fields(Resources):
        if getattr(top.resources, f.name) < 0:
            value = getattr(top.resources, f.name)
            errors.append(f"resources.{f.name}: must be >= 0, got {value!r}")
    if top.max_retries < 0:
        errors.append(f"max_retries: must be >= 0, got {top.max_retries!r}")
    rules = _parse_excludes(top.exclude, axes, broken, errors)
    if errors:
        raise fail(errors)

    trials, errors = _expand(top, base, axes, rules)
    if errors:
        raise fail(errors)
    if not trials:
        raise fail(["the sweep has no trials left after exclude"])
    varying = {}
    plain = [to_dict(t) for t in trials]
    for key in (k for ax in axes for k in ax.keys):
        values = _unique(_lookup(d, key) for d in plain)
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
    )


def axis_assignments(trial: TrialConfig, spec: SweepSpec) -> dict[str, Any]:
    """Values of the spec's varying axes for one trial, as plain data."""
    data = to_dict(trial)
    return {key: _lookup(data, key) for key in spec.axes}


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
    """`value` coerced and type-checked like the TrialConfig field `key`, as plain data."""
    cfg = from_dict(TrialConfig, _nest(key, value), section)
    return _lookup(to_dict(cfg), key)


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
    from rope_lab.rope import ROPE_KINDS

    allowed = [k for k in ROPE_KINDS if k != "default"]
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
        canon = {}
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
            if _canon(plain) not in {_canon(v) for v in axis_values[key]}:
                listed = ", ".join(_fmt(v) for v in _unique(axis_values[key]))
                errors.append(
                    f"{label}.{key}: {_fmt(plain)} never occurs in the axis (values: {listed}), "
                    "so the rule can never match"
                )
            canon[key] = _canon(plain)
        parsed.append(canon)
    return parsed


# ---------------------------------------------------------------------------- expansion


def _expand(
    top: _SpecFile, base: dict, axes: list[_Axis], rules: list[dict[str, str]]
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
        hit = [all(_canon(plain[k]) == v for k, v in rule.items()) for rule in rules]
        for j, h in enumerate(hit):
            matches[j] += h
        if any(hit):
            continue
        data = copy.deepcopy(base)
        for key, value in raw.items():
            _set(data, key, value)
        try:
            cfg = replace(from_dict(TrialConfig, data), name=top.name)
            cfg = validate(_apply_scaling(cfg, top.scaling))
        except ConfigError as err:
            failed += 1
            if failed <= MAX_TRIAL_ERRORS:
                errors.append(f"trial {_fmt(plain)}: {err}")
            continue
        trials.setdefault(cfg.trial_id, cfg)
    if failed > MAX_TRIAL_ERRORS:
        errors.append(f"... and {failed - MAX_TRIAL_ERRORS} more trials fail validation")
    for j, n in enumerate(matches):
        if n == 0:
            errors.append(f"exclude[{j}]: matches no trial of the grid, so it can never apply")
    return list(trials.values()), errors


def _apply_scaling(cfg: TrialConfig, scaling: ScalingSpec | None) -> TrialConfig:
    """Set the RoPE eval stages of a RoPE trial; clear them (no scalings) for any other PE."""
    if scaling is None:
        return cfg
    if cfg.model.position.kind != "rope":
        return replace(cfg, **{"eval.methods": (), "eval.factors": (), "eval.finetune_steps": 0})
    changes = {f"eval.{f.name}": getattr(scaling, f.name) for f in dataclasses.fields(scaling)}
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _set(out, key, value)
    return out


def _set(data: dict, key: str, value: Any) -> None:
    """Set a dotted key in nested dicts, copying intermediate mappings."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, Mapping) else {}
        node = node[part]
    node[last] = value


def _lookup(data: Mapping, key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _unique(values: Any) -> tuple:
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(_canon(v), v)
    return tuple(seen.values())


def _fmt(value: Any) -> str:
    """Compact YAML-like text of a plain value: {a: 1, b: [2, 3]}."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --------------------------------------------------------------------------------- cost


def estimate_cost(trial: TrialConfig) -> dict[str, int]:
    """Analytic parameter count, tokens and FLOPs of one trial.

    n_params (trainable, = `model.count_params`): embedding V D, a learned table
    max_length x D, per block 4 D^2 (attention) + k D M (MLP; k = 3 for SwiGLU, else 2) + two
    norms (2D each for LayerNorm, D for RMSNorm), a final norm, and the readout D V.
    Forward FLOPs of one length-L sequence: F(L) = 2 N L + 4 depth L^2 D, where N counts the
    matmul weights (blocks and readout; embedding and position tables are lookups) and
    4 L^2 D is Q K^T plus A V over the full masked L x L matrix of each layer. A training step
    costs 3 forward passes, so train_flops = 6 N tokens + 12 depth L^2 D per sequence.
    Fine-tuning (RoPE, eval.finetune_steps > 0) repeats that at factor x L for each scaling;
    evaluation is forward only at every eval length, once per scaling (direct; plus each
    method x factor for RoPE, and again after fine-tuning). Periodic hooks are not counted.
    """
    m, tr, ev = trial.model, trial.train, trial.eval
    d, v, k = m.width, trial.task.vocab_size, 3 if m.mlp == "swiglu" else 2
    norm = 2 * d if m.norm == "layernorm" else d
    matmul = m.depth * (4 * d * d + k * d * m.d_mlp) + d * v
    table = trial.max_length * d if m.position.kind == "learned" else 0
    n_params = v * d + table + matmul + m.depth * 2 * norm + norm

    def seq_flops(length: int) -> int:
        return 2 * matmul * length + 4 * m.depth * length * length * d

    scalings: set[tuple[str, float]] = set()
    if m.position.kind == "rope":
        scalings = {(meth, f) for meth in ev.methods for f in ev.factors}
        scalings.discard((m.position.rope.scaling, m.position.rope.factor))
    finetune = ev.finetune_steps if m.position.kind == "rope" else 0
    ft_lengths = [round(f * tr.length) for _, f in scalings] if finetune else []
    passes = 1 + len(scalings) + len(ft_lengths)
    eval_seqs = passes * ev.batches * ev.batch_size
    train_seqs, ft_seqs = tr.steps * tr.batch_size, finetune * tr.batch_size
    cost = {
        "n_params": n_params,
        "matmul_params": matmul,
        "train_tokens": train_seqs * tr.length,
        "train_flops": 3 * train_seqs * seq_flops(tr.length),
        "finetune_tokens": ft_seqs * sum(ft_lengths),
        "finetune_flops": 3 * ft_seqs * sum(seq_flops(n) for n in ft_lengths),
        "eval_tokens": eval_seqs * sum(trial.eval_lengths),
        "eval_flops": eval_seqs * sum(seq_flops(n) for n in trial.eval_lengths),
    }
    cost["total_flops"] = cost["train_flops"] + cost["finetune_flops"] + cost["eval_flops"]
    return cost


def plan_table(spec: SweepSpec, flops_per_s: float = 20e9) -> str:
    """Text table for `rope-lab sweep plan`: one line per trial and a total line.

    CPU time is total FLOPs / `flops_per_s` (sustained); it ignores compilation and per-step
    overhead, which dominate tiny models.
    """
    keys = list(spec.axes)
    short = [k.rsplit(".", 1)[-1] for k in keys]
    heads = [s if short.count(s) == 1 else k for s, k in zip(short, keys, strict=True)]
    header = ["trial", *heads, "params", "train tok", "eval tok", "FLOPs", "CPU time"]
    summed = ("train_tokens", "eval_tokens", "total_flops")
    totals = dict.fromkeys(summed, 0)

    def numbers(cost: dict[str, int]) -> list[str]:
        cells = [_si(cost[name]) for name in summed]
        return [*cells, _duration(cost["total_flops"] / flops_per_s)]

    rows = []
    for trial in spec.trials:
        cost = estimate_cost(trial)
        totals = {name: totals[name] + cost[name] for name in summed}
        values = [_fmt(v) for v in axis_assignments(trial, spec).values()]
        rows.append([trial.trial_id, *values, _si(cost["n_params"]), *numbers(cost)])
    total = [f"total ({len(spec.trials)} trials)", *[""] * len(keys), "", *numbers(totals)]
    widths = [max(len(r[i]) for r in [header, *rows, total]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        text = [c.ljust(w) if i <= len(keys) else c.rjust(w) for i, (c, w) in pairs]
        return "  ".join(text).rstrip()

    rule = "-" * len(line(header))
    intro = (
        f"sweep {spec.name}: {len(spec.trials)} trials; FLOPs = train + fine-tune + eval; "
        f"CPU time at {flops_per_s / 1e9:g} GFLOP/s sustained (compilation not included)"
    )
    return "\n".join([intro, line(header), rule, *map(line, rows), rule, line(total)])


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _duration(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds:.2g}s"


__all__ = [
    "Resources",
    "ScalingSpec",
    "SweepSpec",
    "axis_assignments",
    "estimate_cost",
    "load_spec",
    "parse_spec",
    "plan_table",
]

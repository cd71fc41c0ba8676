"""Typed, frozen configuration dataclasses for one trial, with YAML loading and validation.

Every config is hashable (mappings are stored as sorted tuples of pairs) so it can be a static
field of an Equinox module or a static argument of a jitted function. Errors are `ConfigError`s
that name the key path, the bad value and, where they exist, the allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rope_lab.registry import POSITIONS, TASKS, Registry, UnknownName

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
PARAMETRIZATIONS = ("sp", "ntk", "mup")
DTYPES = ("float32", "bfloat16")

Params = tuple[tuple[str, Any], ...]
T = typing.TypeVar("T")


class ConfigError(ValueError):
    """An invalid configuration; the message names the key path and the bad value."""


def freeze(value: Any) -> Any:
    """Turn mappings into sorted tuples of pairs and lists into tuples, recursively."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(params: Params) -> dict[str, Any]:
    """Inverse of `freeze` for one level of parameters: a dict with tuples turned into lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params}


def variant_class(registry: Registry, name: str, path: str) -> type:
    """The config class registered as `name`; ConfigError naming `path` and the allowed."""
    try:
        return registry[name]
    except UnknownName:
        raise ConfigError(
            f"{path}: unknown value {name!r}{_did_you_mean(name, registry.names())}; "
            f"allowed: {', '.join(registry.names())}"
        ) from None


@dataclass(frozen=True)
class PositionConfig:
    """How positions enter the model: the encoding `kind` and its own typed config `options`
    (a registered `positions.EncodingConfig`, reachable as `position.<kind>` too).

    `max_length` sizes the learned table (None: the longest evaluated length). With
    `randomized`, training positions are a sorted random subset of [0, random_max_length)
    (Ruoss et al. 2023); evaluation draws them the same way.
    """

    kind: str = "rope"
    max_length: int | None = None
    randomized: bool = False
    random_max_length: int | None = None
    # A variant field: in YAML and `to_dict` its fields sit under the kind's name
    # (`model.position.rope.theta`); sub-mappings of other registered kinds are type-checked
    # and dropped, so a grid over kinds x RoPE fields gives each non-RoPE trial once.
    options: Any = dataclasses.field(default=None, metadata={"registry": POSITIONS, "tag": "kind"})

    def __post_init__(self) -> None:
        cls = variant_class(POSITIONS, self.kind, "model.position.kind")
        if type(self.options) is not cls:  # None, or left over from another kind by `replace`
            object.__setattr__(self, "options", cls())

    def __getattr__(self, name: str) -> Any:
        state = self.__dict__
        if name == state.get("kind"):
            return state["options"]
        raise AttributeError(f"PositionConfig has no {name!r} (kind is {state.get('kind')!r})")


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only Transformer shape. Heads default to width // head_dim (fixed head_dim)."""

    width: int = 128
    depth: int = 2
    head_dim: int | None = 32
    heads: int | None = None
    mlp_ratio: float = 4.0
    norm: str = "layernorm"
    mlp: str = "gelu"
    parametrization: str = "sp"
    base_width: int = 128
    dtype: str = "float32"
    position: PositionConfig = dataclasses.field(default_factory=PositionConfig)

    @property
    def n_heads(self) -> int:
        """Number of attention heads."""
        return self.heads if self.heads is not None else self.width // (self.head_dim or 1)

    @property
    def d_head(self) -> int:
        """Dimension of each head."""
        return self.width // self.n_heads

    @property
    def d_mlp(self) -> int:
        """Hidden size of the MLP."""
        return round(self.width * self.mlp_ratio)


@dataclass(frozen=True)
class TaskConfig:
    """A task from `rope_lab.tasks.TASKS`, its vocabulary size and its parameters."""

    name: str = "passkey"
    vocab_size: int = 32
    params: Params = ()


@dataclass(frozen=True)
class TrainConfig:
    """AdamW with linear warmup and cosine decay; `length` is L_train.

    `devices`: train data-parallel over this many local devices (None: all of them); the batch
    is split over them, so `batch_size` must be a multiple of the device count.
    """

    length: int = 64
    batch_size: int = 32
    steps: int = 300
    lr: float = 3e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-8
    clip_norm: float = 1.0
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 0
    eval_every: int = 0
    devices: int | None = None


@dataclass(frozen=True)
class EvalConfig:
    """Length-extrapolation evaluation.

    Lengths are `length_multipliers` x L_train. RoPE models are also evaluated under each
    scaling `method` at each `factor` (zero-shot; and after `finetune_steps` steps at
    factor x L_train when that is > 0). `method_params` holds per-method parameters, e.g.
    `{llama3: {low_freq_factor: 1, high_freq_factor: 4}}`.
    `pad_to_longest`: pad every length's batches (drawn as without it) to the longest evaluated
    length and run them through one compiled forward program (exact for a causal model): one
    compilation instead of one per length, for more compute at the short lengths; pays off for
    tiny, compile-dominated trials (the smoke sweep).
    """

    length_multipliers: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0)
    batches: int = 2
    batch_size: int = 16
    position_buckets: int = 8
    methods: tuple[str, ...] = ("linear", "ntk", "dynamic", "yarn", "llama3")
    factors: tuple[float, ...] = (2.0, 4.0)
    method_params: Params = (("llama3", (("high_freq_factor", 4.0), ("low_freq_factor", 1.0))),)
    finetune_steps: int = 0
    finetune_lr: float = 1e-3
    accuracy_threshold: float = 0.9
    pad_to_longest: bool = False
    seed: int = 1234

    def params_for(self, method: str) -> dict[str, Any]:
        """Extra parameters of one scaling method, as a dict."""
        for name, params in self.method_params:
            if name == method:
                return thaw(params)
        return {}


NTK_OUTPUTS = ("random", "trace", "target")


@dataclass(frozen=True)
class NTKConfig:
    """Empirical-NTK tracking during training.

    Fixed probe sets (seeded, drawn once per trial from the task) of `probes` sequences at
    L_train and at each `probe_multipliers` x L_train; kernels measured at `steps` (empty:
    0, 1, 2, 4, ... and the last step). `output`: "random" (a fixed seeded Gaussian readout
    direction u, the default), "trace" (average over the vocabulary) or "target" (next-token
    logit). `position_probes` sequences give the position-resolved kernel at the end.
    `pad_to_longest`: run every probe set through one compiled gradient program at the longest
    probe length (exact for a causal model): fewer compilations, more compute per NTK step; pays
    off for tiny, compile-dominated trials (the smoke sweep), not at research sizes.
    """

    enabled: bool = True
    probes: int = 8
    probe_multipliers: tuple[float, ...] = (2.0, 4.0, 8.0)
    output: str = "random"
    steps: tuple[int, ...] = ()
    chunk_size: int = 8
    groups: bool = True
    position_probes: int = 2
    pad_to_longest: bool = False
    ridge: float = 1e-3
    seed: int = 4321


@dataclass(frozen=True)
class TrialConfig:
    """Everything that defines one trial."""

    name: str = "trial"
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    task: TaskConfig = TaskConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    ntk: NTKConfig = NTKConfig()

    @property
    def ntk_lengths(self) -> tuple[int, ...]:
        """Long-probe lengths of the NTK tracking (L_train excluded), sorted and unique."""
        lengths = {max(1, round(m * self.train.length)) for m in self.ntk.probe_multipliers}
        return tuple(sorted(lengths - {self.train.length}))

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        """Evaluated lengths, sorted and unique, each at least 1."""
        lengths = {max(1, round(m * self.train.length)) for m in self.eval.length_multipliers}
        return tuple(sorted(lengths))

    @property
    def max_length(self) -> int:
        """Longest position the model must handle (learned table size)."""
        pos = self.model.position
        candidates = [*self.eval_lengths, self.train.length]
        candidates += [int(f * self.train.length) for f in self.eval.factors]
        if self.ntk.enabled:
            candidates += list(self.ntk_lengths)
        if pos.max_length is not None:
            candidates.append(pos.max_length)
        if pos.randomized and pos.random_max_length is not None:
            candidates.append(pos.random_max_length)
        return max(candidates)

    @functools.cached_property
    def trial_id(self) -> str:
        """Readable slug plus a hash of the canonical config (computed once per config)."""
        m = self.model
        slug = (
            f"{self.task.name}-{m.position.kind}{m.position.options.slug()}-w{m.width}"
            f"-d{m.depth}-L{self.train.length}-s{self.train.seed}"
        )
        return f"{slug}-{config_hash(self)}"


def dotted_fields(cls: type = TrialConfig, prefix: str = "") -> dict[str, Any]:
    """Every leaf field of a config dataclass as dotted path -> type hint, in declaration order.

    E.g. `{"name": str, "model.width": int, ..., "task.params": Params, ...}`; nested config
    dataclasses are descended into, `Params` mappings are leaves, and a variant field lists
    the fields of every registered variant under its name (`model.position.rope.theta`).
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path, tp = f"{prefix}{f.name}", hints[f.name]
        if "registry" in f.metadata:
            for name, variant in f.metadata["registry"].items():
                out.update(dotted_fields(variant, f"{prefix}{name}."))
        elif dataclasses.is_dataclass(tp):
            out.update(dotted_fields(tp, f"{path}."))  # type: ignore[arg-type]
        else:
            out[path] = tp
    return out


def variant_tag(key: str, cls: type = TrialConfig) -> tuple[str, str] | None:
    """For a dotted key inside a variant's fields, (dotted tag key, variant name), e.g.
    "model.position.rope.theta" -> ("model.position.kind", "rope"); else None."""
    head, _, rest = key.partition(".")
    for f in dataclasses.fields(cls):
        if "registry" in f.metadata and head in f.metadata["registry"]:
            return f.metadata["tag"], head
        if f.name == head and rest and dataclasses.is_dataclass(hint := _hint_of(cls, f.name)):
            found = variant_tag(rest, hint)  # type: ignore[arg-type]
            return None if found is None else (f"{head}.{found[0]}", found[1])
    return None


def _hint_of(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain, YAML/JSON-able dict of a config (params as mappings, a variant's fields under
    its name)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if "registry" in f.metadata:
            if dataclasses.fields(value):
                out[getattr(cfg, f.metadata["tag"])] = to_dict(value)
        elif dataclasses.is_dataclass(value):
            out[f.name] = to_dict(value)
        elif hints[f.name] == Params:
            out[f.name] = {k: _params_to_plain(v) for k, v in value}
        elif isinstance(value, tuple):
            out[f.name] = list(value)
        else:
            out[f.name] = value
    return out


def _params_to_plain(value: Any) -> Any:
    pairs = isinstance(value, tuple) and bool(value)
    pairs = pairs and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value
    )
    if pairs:
        return {k: _params_to_plain(v) for k, v in value}
    if isinstance(value, tuple):
        return [_params_to_plain(v) for v in value]
    return value


# How a trial runs, not what it computes: left out of trial ids, so a finished trial is found
# again when rerun on another device count, NTK chunking or eval/NTK padding.
EXECUTION_FIELDS = (
    "train.devices",
    "eval.pad_to_longest",
    "ntk.chunk_size",
    "ntk.pad_to_longest",
)


def config_hash(cfg: Any, n: int = 10) -> str:
    """Stable hex digest of a config's canonical JSON (`name` and EXECUTION_FIELDS excluded)."""
    data = to_dict(cfg)
    data.pop("name", None)
    for dotted in EXECUTION_FIELDS:
        section, _, key = dotted.partition(".")
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _coerce(value: Any, tp: Any, path: str) -> Any:
    if tp == Params:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping of parameters, got {value!r}")
        return freeze(value)
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{path}: must not be null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return from_dict(tp, value, path)  # type: ignore[arg-type]
    if typing.get_origin(tp) is tuple:
        (inner, *_) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            value = [value]
        return tuple(_coerce(v, inner, f"{path}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    return value


def unknown_key_message(key: str, allowed: list[str], path: str) -> str:
    """'unknown key' message with a did-you-mean suggestion and the allowed keys."""
    hint = _did_you_mean(key, allowed)
    return f"{path}: unknown key '{key}'{hint}; allowed: {', '.join(sorted(allowed))}"


def _did_you_mean(key: str, allowed: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def from_dict(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build a config dataclass from a nested mapping, rejecting unknown keys and bad types."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    kwargs = {}
    for f in (f for f in fields if "registry" in f.metadata):
        registry, tag = f.metadata["registry"], f.metadata["tag"]
        default = next(g.default for g in fields if g.name == tag)
        chosen = data.get(tag, default)
        names = [n for n in names if n != f.name] + list(registry.names())
        for name in (n for n in registry.names() if n in data):
            value, name_path = data[name], _join(path, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"{name_path}: expected a mapping, got {value!r}")
            variant = from_dict(registry[name], value or {}, name_path)
            if name == chosen:
                kwargs[f.name] = variant
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in names:
            raise ConfigError(unknown_key_message(str(key), names, key_path))
        if key in hints:
            kwargs[key] = _coerce(value, hints[key], key_path)
    return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_choice(value: str, allowed: tuple[str, ...], path: str) -> None:
    if value not in allowed:
        raise ConfigError(f"{path}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def _check_positive(value: float | int | None, path: str, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{path}: must be {bound}, got {value!r}")


def validate(cfg: TrialConfig) -> TrialConfig:
    """Check a trial config; raise ConfigError naming the key path. Returns the config.

    Each variant checks its own fields and the rules that involve it (the position encoding,
    the task), so this module imports none of them.
    """
    m, p = cfg.model, cfg.model.position
    tr = cfg.train
    for name in ("length", "batch_size", "lr", "clip_norm"):
        _check_positive(getattr(tr, name), f"train.{name}")
    for name in ("steps", "warmup_steps", "weight_decay", "checkpoint_every", "eval_every"):
        _check_positive(getattr(tr, name), f"train.{name}", allow_zero=True)
    _check_positive(tr.log_every, "train.log_every")
    _check_positive(tr.devices, "train.devices")
    if tr.devices is not None and tr.batch_size % tr.devices:
        raise ConfigError(
            f"train.batch_size: {tr.batch_size} is not divisible by train.devices={tr.devices}"
        )
    if not 0 <= tr.min_lr_ratio <= 1:
        raise ConfigError(f"train.min_lr_ratio: must be in [0, 1], got {tr.min_lr_ratio!r}")

    ev = cfg.eval
    for i, mult in enumerate(ev.length_multipliers):
        if mult * tr.length < 1:
            raise ConfigError(
                f"eval.length_multipliers[{i}]: {mult} x train.length={tr.length} is below 1"
            )
    for name in ("batches", "batch_size", "position_buckets"):
        _check_positive(getattr(ev, name), f"eval.{name}")
    _check_positive(ev.finetune_steps, "eval.finetune_steps", allow_zero=True)
    if not 0 < ev.accuracy_threshold <= 1:
        raise ConfigError(
            f"eval.accuracy_threshold: must be in (0, 1], got {ev.accuracy_threshold!r}"
        )
    for i, factor in enumerate(ev.factors):
        if factor < 1:
            raise ConfigError(f"eval.factors[{i}]: factor must be >= 1, got {factor!r}")
    for name in ("width", "depth", "base_width"):
        _check_positive(getattr(m, name), f"model.{name}")
    _check_positive(m.mlp_ratio, "model.mlp_ratio")
    _check_choice(m.norm, NORMS, "model.norm")
    _check_choice(m.mlp, MLPS, "model.mlp")
    _check_choice(m.parametrization, PARAMETRIZATIONS, "model.parametrization")
    _check_choice(m.dtype, DTYPES, "model.dtype")
    if (m.heads is None) == (m.head_dim is None):
        raise ConfigError(
            "model.heads / model.head_dim: set exactly one "
            f"(got heads={m.heads!r}, head_dim={m.head_dim!r})"
        )
    if m.heads is not None:
        _check_positive(m.heads, "model.heads")
        if m.width % m.heads:
            raise ConfigError(f"model.heads: {m.heads} does not divide model.width={m.width}")
    else:
        _check_positive(m.head_dim, "model.head_dim")
        if m.width % m.head_dim:  # type: ignore[operator]
            raise ConfigError(f"model.head_dim: {m.head_dim} does not divide model.width={m.width}")
    _check_positive(p.max_length, "model.position.max_length")
    p.options.check(cfg, f"model.position.{p.kind}")
    TASKS.module().check_trial(cfg)

    nk = cfg.ntk
    _check_choice(nk.output, NTK_OUTPUTS, "ntk.output")
    for name in ("probes", "chunk_size", "position_probes"):
        _check_positive(getattr(nk, name), f"ntk.{name}")
    _check_positive(nk.ridge, "ntk.ridge")
    for i, mult in enumerate(nk.probe_multipliers):
        if mult < 1:
            raise ConfigError(f"ntk.probe_multipliers[{i}]: must be >= 1, got {mult!r}")
    for i, step in enumerate(nk.steps):
        if not 0 <= step <= tr.steps:
            raise ConfigError(f"ntk.steps[{i}]: must be in [0, train.steps={tr.steps}], got {step}")
    return cfg


def load_trial(path: str | Path) -> TrialConfig:
    """Read a trial YAML file into a validated TrialConfig; errors name the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read YAML: {err}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return validate(from_dict(TrialConfig, data))
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def replace(cfg: Any, **changes: Any) -> Any:
    """`dataclasses.replace` that accepts dotted paths, e.g. replace(cfg, **{"model.width": 64}).

    A variant's fields are addressed by its name (`model.position.rope.theta`); changes to a
    variant other than the chosen one are dropped, as in `from_dict`.
    """
    nested: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for f in (f for f in dataclasses.fields(cfg) if "registry" in f.metadata):
        registry, tag = f.metadata["registry"], f.metadata["tag"]
        chosen = direct.get(tag, getattr(cfg, tag))
        for name in [n for n in (*nested, *direct) if n in registry]:
            sub, whole = nested.pop(name, {}), direct.pop(name, None)
            if name == chosen:
                current = getattr(cfg, f.name)
                base = whole or (current if type(current) is registry[name] else registry[name]())
                direct[f.name] = replace(base, **sub)
    for head, sub in nested.items():
        direct[head] = replace(getattr(cfg, head), **sub)
    return dataclasses.replace(cfg, **direct)


__all__ = [
    "DTYPES",
    "MLPS",
    "NORMS",
    "PARAMETRIZATIONS",
    "ConfigError",
    "EvalConfig",
    "ModelConfig",
    "NTKConfig",
    "PositionConfig",
    "TaskConfig",
    "TrainConfig",
    "TrialConfig",
    "config_hash",
    "dotted_fields",
    "from_dict",
    "load_trial",
    "replace",
    "to_dict",
    "validate",
]

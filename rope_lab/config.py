"""Typed, frozen configuration dataclasses for one trial, with YAML loading and validation.

Every config is hashable (mappings are stored as sorted tuples of pairs) so it can be a static
field of an Equinox module or a static argument of a jitted function. Errors are `ConfigError`s
that name the key path, the bad value and, where they exist, the allowed values.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rope_lab import typed
from rope_lab.registry import POSITIONS, TASKS
from rope_lab.typed import (
    ConfigError,
    Params,
    check_choice,
    check_positive,
    freeze,
    from_dict,
    replace,
    thaw,
    to_dict,
    unknown_key_message,
    variant_class,
    variant_field,
)

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
PARAMETRIZATIONS = ("sp", "ntk", "mup")
DTYPES = ("float32", "bfloat16")
# How attention is computed (`rope_lab.model.attention`); all give the same numbers to rounding.
ATTENTION_IMPLEMENTATIONS = ("auto", "blocked", "reference", "cudnn")
# how a cached decoder treats length-dependent RoPE scalings (`rope_lab.model.decode`)
DECODE_PROTOCOLS = ("prefill_fixed", "per_step_recompute", "per_step_stale", "per_step_full")
# the `protocol` of decode rows whose scaling does not depend on the length: every protocol
# gives the same tokens (tested), so they are decoded once
ANY_PROTOCOL = "any"


@dataclass(frozen=True)
class PositionConfig:
    """How positions enter the model: the encoding `kind` and its own typed config `options`
    (a registered `positions.EncodingConfig`; in YAML and result columns under the kind's name,
    `model.position.<kind>.<field>`).

    `max_length` sizes the learned table (None: the longest evaluated length). With
    `randomized`, training positions are a sorted random subset of [0, random_max_length)
    (Ruoss et al. 2023); evaluation draws them the same way.
    """

    kind: str = "rope"
    max_length: int | None = None
    randomized: bool = False
    random_max_length: int | None = None
    options: Any = variant_field(POSITIONS, "kind")

    def __post_init__(self) -> None:
        cls = variant_class(POSITIONS, self.kind, "model.position.kind")
        if type(self.options) is not cls:  # None, or left over from another kind by `replace`
            object.__setattr__(self, "options", cls())


@dataclass(frozen=True)
class LayerConfig:
    """One kind of layer in `model.layers`, the repeating pattern of layer kinds.

    `position`: this kind's own encoding (a bias or rotation family: `{kind: none}` for NoPE
    layers, `{kind: rope, rope: {theta: 1.0e6}}` for a per-layer base); None uses
    `model.position`. Absolute encodings add to the input once, so they stay in
    `model.position`. `window`: sliding-window attention over the last `window` keys (None:
    full causal). `attn_scale` > 0: Llama 4's query scaling, query i's logits times
    1 + attn_scale log(1 + floor((p_i + 1) / floor_scale)) at position p_i. `eval_scaling`:
    whether evaluation-time RoPE scaling (PI, YaRN, ...) applies to this kind's RoPE.
    """

    position: PositionConfig | None = None
    window: int | None = None
    attn_scale: float = 0.0
    floor_scale: float = 8192.0
    eval_scaling: bool = True

    def slug(self, model: ModelConfig) -> str:
        """Short name of the kind in trial ids, e.g. 'rope.w16' or 'none'."""
        pos = self.position or model.position
        tag = "" if self.position is None else pos.options.layer_tag()
        parts = [f"{pos.kind}{tag}"]
        if self.window is not None:
            parts.append(f"w{self.window}")
        if self.attn_scale:
            parts.append(f"t{self.attn_scale:g}")
        if not self.eval_scaling:
            parts.append("fixed")
        return ".".join(parts)


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only Transformer shape. Heads default to width // head_dim (fixed head_dim).

    `attention` picks how attention is computed (`rope_lab.model.attention`: auto, blocked,
    reference, cudnn); it changes memory and speed, not results, so trial ids ignore it.
    `layers`: a pattern of layer kinds repeated through the depth (`LayerConfig`; e.g. three
    sliding-window RoPE layers then one full NoPE layer); empty: every layer is `LayerConfig()`.
    `scalable_softmax`: Scalable-Softmax (Nakanishi 2025): each query's logits times
    s_h log(n), n the number of keys it attends, s learned per head and layer (initialised to
    1 / log(L_train), so the last training position starts at temperature 1).
    """

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
    attention: str = "auto"
    position: PositionConfig = dataclasses.field(default_factory=PositionConfig)
    layers: tuple[LayerConfig, ...] = ()
    scalable_softmax: bool = False

    @property
    def pattern(self) -> tuple[LayerConfig, ...]:
        """The repeating layer kinds (one default kind when `layers` is empty)."""
        return self.layers or (LayerConfig(),)

    def layer_position(self, layer: LayerConfig) -> PositionConfig:
        """The encoding config a layer kind uses."""
        return layer.position or self.position

    def with_position(self, position: PositionConfig) -> ModelConfig:
        """This config with `position` as the model-wide encoding (to build a layer's own)."""
        return dataclasses.replace(self, position=position)

    @property
    def supports_scaling(self) -> bool:
        """Whether evaluation-time RoPE scaling applies to any layer kind."""
        return any(
            self.layer_position(layer).options.supports_scaling and layer.eval_scaling
            for layer in self.pattern
        )

    @property
    def scaled_position(self) -> PositionConfig:
        """The encoding config of the first layer kind evaluation scaling applies to."""
        return next(
            self.layer_position(layer)
            for layer in self.pattern
            if self.layer_position(layer).options.supports_scaling and layer.eval_scaling
        )

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
    `pose_target_length`: train with PoSE (Zhu et al. 2024): each sequence of `length` tokens
    is cut into `pose_chunks` chunks whose position ids are shifted by skips drawn uniformly,
    so they cover [0, pose_target_length) (None: contiguous positions 0..length-1).
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
    pose_target_length: int | None = None
    pose_chunks: int = 2


@dataclass(frozen=True)
class DecodeConfig:
    """Decode-time evaluation (`rope_lab.trial.decode_eval`): the answer of each evaluated sequence
    generated greedily with a key/value cache under each of `protocols` (`DECODE_PROTOCOLS`;
    empty: off). The task's answer length sets how many tokens are generated, at most
    `max_new_tokens` (None: the whole answer); only the generated tokens are scored."""

    protocols: tuple[str, ...] = ()
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class EvalConfig:
    """Length-extrapolation evaluation.

    Lengths are `length_multipliers` x L_train. RoPE models are also evaluated under each
    scaling `method` at each `factor` (zero-shot; and after `finetune_steps` steps at
    factor x L_train when that is > 0, for the `finetune_methods` at the `finetune_factors`
    only when those are given: e.g. `[linear, default]` fine-tunes PI and, as its control,
    unscaled RoPE at the same target length). `method_params` holds per-method parameters, e.g.
    `{llama3: {low_freq_factor: 1, high_freq_factor: 4}}`.
    `pad_to_longest`: pad every length's batches (drawn as without it) to the longest evaluated
    length and run them through one compiled forward program (exact for a causal model): one
    compilation instead of one per length, for more compute at the short lengths; pays off for
    tiny, compile-dominated trials (the smoke sweep).
    `memory_budget_mb`: a batch whose forward would need more (`rope_lab.model.memory`) runs as
    equal sub-batches that fit, with the same numbers; long lengths need no hand-picked
    batch size.
    `text_protocol` (language-model tasks on a text): `random` windows (`batches` x
    `batch_size` per length), or Press et al.'s `nonoverlapping` windows or `sliding` windows
    scoring their last min(`text_stride`, L) bytes (default stride L_train) over the whole
    held-out text, the same text at every length (`tasks.text_lm.text_windows`).
    `zero_shot_temperature`: also evaluate every model (any encoding) with its attention logits
    multiplied by max(1, log L / log L_train) at length L (the entropy-invariance argument), as
    a zero-shot stage of its own next to the RoPE scalings.
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
    finetune_methods: tuple[str, ...] = ()
    finetune_factors: tuple[float, ...] = ()
    accuracy_threshold: float = 0.9
    pad_to_longest: bool = False
    memory_budget_mb: float = 4096.0
    zero_shot_temperature: bool = False
    text_protocol: str = "random"
    text_stride: int | None = None
    decode: DecodeConfig = DecodeConfig()
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
        if self.train.pose_target_length is not None:
            candidates.append(self.train.pose_target_length)
        return max(candidates)

    @functools.cached_property
    def trial_id(self) -> str:
        """Readable slug plus `training_hash`: the id of the trained model, which evaluation
        stages hang off (`rope_lab.trial.stage_plan`). Computed once per config."""
        m = self.model
        layout = "".join(f"+{layer.slug(m)}" for layer in m.layers)
        layout += "-ssmax" if m.scalable_softmax else ""
        pose = self.train.pose_target_length
        layout += f"-pose{pose}" if pose is not None else ""
        slug = (
            f"{self.task.name}-{m.position.kind}{m.position.options.slug()}{layout}-w{m.width}"
            f"-d{m.depth}-L{self.train.length}-s{self.train.seed}"
        )
        return f"{slug}-{training_hash(self)}"


def dotted_fields(cls: type = TrialConfig, prefix: str = "") -> dict[str, Any]:
    """`typed.dotted_fields` of a TrialConfig by default: dotted path -> type hint."""
    return typed.dotted_fields(cls, prefix)


def variant_tag(key: str, cls: type = TrialConfig) -> tuple[str, str] | None:
    """`typed.variant_tag` of a TrialConfig key: (dotted tag key, variant name) or None."""
    return typed.variant_tag(key, cls)


# How a trial runs, not what it computes: left out of trial ids, so a finished trial is found
# again when rerun on another device count, attention kernel, NTK chunking or eval/NTK padding.
EXECUTION_FIELDS = (
    "model.attention",
    "train.devices",
    "eval.pad_to_longest",
    "eval.memory_budget_mb",
    "ntk.chunk_size",
    "ntk.pad_to_longest",
)


# Fields added after trials were first run, with the value that means "as before": at that
# value they are left out of the hash, so adding an off-by-default method keeps every existing
# trial id (and its finished results) valid.
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "model.layers": [],
    "model.scalable_softmax": False,
    "train.pose_target_length": None,
    "train.pose_chunks": 2,
    "eval.zero_shot_temperature": False,
    "eval.finetune_methods": [],
    "eval.finetune_factors": [],
    "eval.text_protocol": "random",
    "eval.text_stride": None,
}


def config_hash(cfg: Any, n: int = 10) -> str:
    """Stable hex digest of a config's canonical JSON (`name`, EXECUTION_FIELDS and fields at
    their NEUTRAL_DEFAULTS excluded)."""
    return _digest(to_dict(cfg), n)


def _digest(data: dict[str, Any], n: int) -> str:
    """`config_hash` of a config already as a dict (sections as sub-dicts)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items() if k != "name"}
    for dotted in EXECUTION_FIELDS:
        section, _, key = dotted.partition(".")
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    for dotted, neutral in NEUTRAL_DEFAULTS.items():
        section, _, key = dotted.partition(".")
        if isinstance(data.get(section), dict) and data[section].get(key, neutral) == neutral:
            data[section].pop(key, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


# The sections that decide the trained model (and its NTK trajectory); `eval` is not one: the
# evaluation and extension stages are keyed by their own fields (`rope_lab.trial.stage_plan`).
TRAINING_SECTIONS = ("model", "task", "train", "ntk")


def training_hash(cfg: TrialConfig, n: int = 10) -> str:
    """`config_hash` of what trains a trial's model: the TRAINING_SECTIONS, plus the position
    table's length (`max_length`, which the eval lengths can set) when an encoding of the model
    is `sized_by_length` (a learned table). Specs differing only in evaluation, scalings or
    fine-tunes share the trained model."""
    full = to_dict(cfg)
    data: dict[str, Any] = {section: full[section] for section in TRAINING_SECTIONS}
    m = cfg.model
    if any(m.layer_position(layer).options.sized_by_length for layer in m.pattern):
        data["table_length"] = cfg.max_length
    return _digest(data, n)


def validate(cfg: TrialConfig) -> TrialConfig:
    """Check a trial config; raise ConfigError naming the key path. Returns the config.

    Each variant checks its own fields and the rules that involve it (the position encoding,
    the task), so this module imports none of them.
    """
    m, p = cfg.model, cfg.model.position
    tr = cfg.train
    for name in ("length", "batch_size", "lr", "clip_norm"):
        check_positive(getattr(tr, name), f"train.{name}")
    for name in ("steps", "warmup_steps", "weight_decay", "checkpoint_every", "eval_every"):
        check_positive(getattr(tr, name), f"train.{name}", allow_zero=True)
    check_positive(tr.log_every, "train.log_every")
    check_positive(tr.devices, "train.devices")
    if tr.devices is not None and tr.batch_size % tr.devices:
        raise ConfigError(
            f"train.batch_size: {tr.batch_size} is not divisible by train.devices={tr.devices}"
        )
    if tr.pose_target_length is not None and tr.pose_target_length < tr.length:
        raise ConfigError(
            f"train.pose_target_length: must be >= train.length={tr.length}, "
            f"got {tr.pose_target_length!r}"
        )
    if not 1 <= tr.pose_chunks <= tr.length:
        raise ConfigError(
            f"train.pose_chunks: must be in [1, train.length={tr.length}], got {tr.pose_chunks!r}"
        )
    reads_positions = any(m.layer_position(k).options.takes_positions for k in m.pattern)
    if tr.pose_target_length is not None and not reads_positions:
        raise ConfigError(
            "train.pose_target_length: PoSE needs an encoding that takes positions, "
            f"not model.position.kind={p.kind!r}"
        )
    if tr.pose_target_length is not None and m.position.randomized:
        raise ConfigError(
            "train.pose_target_length: PoSE and model.position.randomized both choose the "
            "training positions; set one"
        )
    if not 0 <= tr.min_lr_ratio <= 1:
        raise ConfigError(f"train.min_lr_ratio: must be in [0, 1], got {tr.min_lr_ratio!r}")

    ev = cfg.eval
    for i, mult in enumerate(ev.length_multipliers):
        if mult * tr.length < 1:
            raise ConfigError(
                f"eval.length_multipliers[{i}]: {mult} x train.length={tr.length} is below 1"
            )
    for name in ("batches", "batch_size", "position_buckets", "memory_budget_mb"):
        check_positive(getattr(ev, name), f"eval.{name}")
    check_positive(ev.finetune_steps, "eval.finetune_steps", allow_zero=True)
    for name, chosen, among in (
        ("finetune_methods", ev.finetune_methods, ev.methods),
        ("finetune_factors", ev.finetune_factors, ev.factors),
    ):
        for i, value in enumerate(chosen):
            if value not in among:
                raise ConfigError(
                    f"eval.{name}[{i}]: {value!r} is not among eval.{name[9:]} "
                    f"{list(among)}; fine-tuning applies to evaluated scalings"
                )
    if not 0 < ev.accuracy_threshold <= 1:
        raise ConfigError(
            f"eval.accuracy_threshold: must be in (0, 1], got {ev.accuracy_threshold!r}"
        )
    for i, factor in enumerate(ev.factors):
        if factor < 1:
            raise ConfigError(f"eval.factors[{i}]: factor must be >= 1, got {factor!r}")
    for name in ("width", "depth", "base_width"):
        check_positive(getattr(m, name), f"model.{name}")
    check_positive(m.mlp_ratio, "model.mlp_ratio")
    check_choice(m.norm, NORMS, "model.norm")
    check_choice(m.mlp, MLPS, "model.mlp")
    check_choice(m.parametrization, PARAMETRIZATIONS, "model.parametrization")
    check_choice(m.dtype, DTYPES, "model.dtype")
    check_choice(m.attention, ATTENTION_IMPLEMENTATIONS, "model.attention")
    if (m.heads is None) == (m.head_dim is None):
        raise ConfigError(
            "model.heads / model.head_dim: set exactly one "
            f"(got heads={m.heads!r}, head_dim={m.head_dim!r})"
        )
    if m.heads is not None:
        check_positive(m.heads, "model.heads")
        if m.width % m.heads:
            raise ConfigError(f"model.heads: {m.heads} does not divide model.width={m.width}")
    else:
        check_positive(m.head_dim, "model.head_dim")
        if m.width % m.head_dim:  # type: ignore[operator]
            raise ConfigError(f"model.head_dim: {m.head_dim} does not divide model.width={m.width}")
    check_positive(p.max_length, "model.position.max_length")
    p.options.check(cfg, f"model.position.{p.kind}")
    _check_layers(cfg)
    TASKS.module().check_trial(cfg)

    nk = cfg.ntk
    check_choice(nk.output, NTK_OUTPUTS, "ntk.output")
    for name in ("probes", "chunk_size", "position_probes"):
        check_positive(getattr(nk, name), f"ntk.{name}")
    check_positive(nk.ridge, "ntk.ridge")
    for i, mult in enumerate(nk.probe_multipliers):
        if mult < 1:
            raise ConfigError(f"ntk.probe_multipliers[{i}]: must be >= 1, got {mult!r}")
    for i, step in enumerate(nk.steps):
        if not 0 <= step <= tr.steps:
            raise ConfigError(f"ntk.steps[{i}]: must be in [0, train.steps={tr.steps}], got {step}")
    return cfg


def _check_layers(cfg: TrialConfig) -> None:
    """`model.layers`: the pattern divides the depth; each kind's encoding checks itself."""
    m = cfg.model
    if not m.layers:
        return
    if m.depth % len(m.layers):
        raise ConfigError(
            f"model.layers: a pattern of {len(m.layers)} kinds does not divide "
            f"model.depth={m.depth}"
        )
    for i, layer in enumerate(m.layers):
        path = f"model.layers[{i}]"
        check_positive(layer.window, f"{path}.window")
        check_positive(layer.attn_scale, f"{path}.attn_scale", allow_zero=True)
        check_positive(layer.floor_scale, f"{path}.floor_scale")
        pos = layer.position
        if pos is None:
            continue
        if pos.randomized or pos.max_length is not None or pos.random_max_length is not None:
            raise ConfigError(
                f"{path}.position: randomized / max_length / random_max_length are set on "
                "model.position only"
            )
        if "embed" in pos.options.hooks:
            raise ConfigError(
                f"{path}.position.kind: {pos.kind!r} adds to the input once; set it as "
                "model.position"
            )
        trained = pos.options.trained_scaling()
        if trained is not None and trained[0] != "default":
            raise ConfigError(
                f"{path}.position.{pos.kind}.scaling: a layer kind trains unscaled; "
                f"got {trained[0]!r}"
            )
        layer_trial = dataclasses.replace(cfg, model=m.with_position(pos))
        pos.options.check(layer_trial, f"{path}.position.{pos.kind}")


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


__all__ = [
    "DTYPES",
    "MLPS",
    "NORMS",
    "PARAMETRIZATIONS",
    "ConfigError",
    "EvalConfig",
    "LayerConfig",
    "ModelConfig",
    "NTKConfig",
    "Params",
    "PositionConfig",
    "TaskConfig",
    "TrainConfig",
    "TrialConfig",
    "config_hash",
    "dotted_fields",
    "freeze",
    "from_dict",
    "load_trial",
    "replace",
    "thaw",
    "to_dict",
    "unknown_key_message",
    "validate",
    "variant_tag",
]

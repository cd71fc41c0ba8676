"""A trial's config: its sections, YAML loading and validation.

Each section lives next to what it builds, with its own checks: `model` in
`rope_lab.model.config`, `train` and `eval` in `rope_lab.trial.config`, `ntk` in
`rope_lab.ntk.config`; the task section (a name and parameters the task registry checks) is
here. They are re-exported here, the one import for a whole trial's config; trial ids are in
`rope_lab.trial.ids`. Every config is hashable (mappings are stored as sorted tuples of pairs)
so it can be a static field of an Equinox module or a static argument of a jitted function.
Errors are `ConfigError`s that name the key path, the bad value and, where they exist, the
allowed values. Importing this module does not import JAX.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rope_lab import typed
from rope_lab.model.config import (
    ATTENTION_IMPLEMENTATIONS,
    DTYPES,
    MLPS,
    NORMS,
    PARAMETRIZATIONS,
    InitConfig,
    LayerConfig,
    ModelConfig,
    PositionConfig,
    check_model,
)
from rope_lab.ntk.config import NTK_OUTPUTS, NTKConfig, check_ntk
from rope_lab.registry import TASKS
from rope_lab.roles import Role, execution, identity
from rope_lab.trial import ids
from rope_lab.trial.config import (
    ANY_PROTOCOL,
    DECODE_PROTOCOLS,
    SCALING_KEYS,
    DecodeConfig,
    EvalConfig,
    TrainConfig,
    check_eval,
    check_train,
)
from rope_lab.trial.ids import config_hash
from rope_lab.typed import (
    ConfigError,
    Params,
    freeze,
    from_dict,
    params_field,
    replace,
    thaw,
    to_dict,
    unknown_key_message,
)
from rope_lab.yaml_files import read_yaml


@dataclass(frozen=True)
class TaskConfig:
    """A task from `rope_lab.tasks.TASKS`, its vocabulary size and its parameters."""

    name: str = identity("passkey")
    vocab_size: int = identity(32)
    params: Params = params_field(TASKS, "name", role=Role(True))


@dataclass(frozen=True)
class TrialConfig:
    """Everything that defines one trial."""

    name: str = execution("trial")  # the sweep's name: where its results go
    model: ModelConfig = identity(factory=ModelConfig)
    task: TaskConfig = identity(factory=TaskConfig)
    train: TrainConfig = identity(factory=TrainConfig)
    eval: EvalConfig = identity(factory=EvalConfig)
    ntk: NTKConfig = identity(factory=NTKConfig)

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
        """Readable slug plus training hash (`rope_lab.trial.ids`). Computed once per config."""
        return ids.trial_id(self)


def dotted_fields(cls: type = TrialConfig, prefix: str = "") -> dict[str, Any]:
    """`typed.dotted_fields` of a TrialConfig by default: dotted path -> type hint."""
    return typed.dotted_fields(cls, prefix)


def variant_tag(key: str, cls: type = TrialConfig) -> tuple[str, str] | None:
    """`typed.variant_tag` of a TrialConfig key: (dotted tag key, variant name) or None."""
    return typed.variant_tag(key, cls)


def validate(cfg: TrialConfig) -> TrialConfig:
    """Check a trial config section by section; raise ConfigError naming the key path.
    Returns the config (with `model.init.hf`, completed from the checkpoint's config.json:
    `rope_lab.hf.trial.from_checkpoint`). Each variant checks its own fields and the rules
    that involve it (the position encoding, the task), so this module imports none of them."""
    if cfg.model.init.hf is not None:  # the checkpoint decides the architecture
        from rope_lab.hf.trial import from_checkpoint

        cfg = from_checkpoint(cfg)
    check_train(cfg)
    check_eval(cfg)
    check_model(cfg)
    TASKS.module().check_trial(cfg)
    check_ntk(cfg)
    return cfg


def unused_settings(data: Mapping, cfg: TrialConfig) -> list[tuple[str, str, str]]:
    """(dotted key, why, the value that makes it so) of each setting the trial mapping `data`
    writes that its trial `cfg` does not use: a variant's block its tag does not select
    (`typed.unselected_blocks`: `model.position.rope` under `kind: alibi`), and a RoPE
    evaluation key (`SCALING_KEYS`) set non-empty and off its default (a saved config writes
    the defaults) on a model without RoPE scalings (`ModelConfig.supports_scaling`). The
    reason reads "{why} {value!r}"."""
    out = [
        (block, f"{tag} is", chosen)
        for block, tag, chosen in typed.unselected_blocks(TrialConfig, data)
    ]
    written = data.get("eval")
    if not cfg.model.supports_scaling and isinstance(written, Mapping):
        for key in SCALING_KEYS:
            name = key.removeprefix("eval.")
            if name not in written:
                continue
            value = getattr(from_dict(EvalConfig, {name: written[name]}), name)
            if value and value != getattr(EvalConfig(), name):
                out.append((key, *no_scalings(cfg)))
    return out


def no_scalings(cfg: TrialConfig) -> tuple[str, str]:
    """What keeps a model from RoPE scalings, as (why, value): its family, or its encoding."""
    if not cfg.model.arch.supports_scaling:
        return "there are no RoPE scalings under model.family", cfg.model.family
    return "there are no RoPE scalings under model.position.kind", cfg.model.position.kind


def load_trial(path: str | Path, *, saved: bool = False) -> TrialConfig:
    """Read a trial YAML file into a validated TrialConfig; errors name the file. A setting
    the trial does not use (`unused_settings`) is refused, unless `saved`: a config rope_lab
    wrote, which holds every field, unused defaults included."""
    path = Path(path)
    data = read_yaml(path) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        cfg = validate(from_dict(TrialConfig, data))
        unused = [] if saved else unused_settings(data, cfg)
        if unused:
            key, why, value = unused[0]
            raise ConfigError(f"{key}: not used, because {why} {value!r}; remove it")
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return cfg


__all__ = [
    "ANY_PROTOCOL",
    "ATTENTION_IMPLEMENTATIONS",
    "DECODE_PROTOCOLS",
    "DTYPES",
    "MLPS",
    "NORMS",
    "NTK_OUTPUTS",
    "PARAMETRIZATIONS",
    "ConfigError",
    "DecodeConfig",
    "EvalConfig",
    "InitConfig",
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

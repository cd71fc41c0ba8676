"""The position-encoding config base (JAX-free): `EncodingConfig`, which every encoding subclasses.

Each encoding has a typed, frozen config registered under its `kind` (`registry.POSITIONS`):
its own fields, its validation, and what the rest of rope_lab asks of it as class attributes
(`supports_scaling`, `hooks`, `takes_positions`, plot `label`/`order`/`color`). Its `build`
returns the encoding's Equinox module, whose hooks (`embed`, `rotate`, `bias`,
`contextual_bias`) are defined in `positions/modules/base.py: PositionEncoding`; the module's
code is imported only when it is built.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from rope_lab.model import rope
from rope_lab.model.positions.randomized import check_randomized
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from jaxtyping import PRNGKeyArray

    from rope_lab.config import ModelConfig, TrialConfig
    from rope_lab.model.positions.modules.base import PositionEncoding


@dataclasses.dataclass(frozen=True)
class EncodingConfig:
    """Base of every registered encoding config: its fields live under `model.position.<kind>`.

    Subclasses set the class attributes and override `build` (and `check` for their own
    rules); `name` is set by the registry.
    """

    name: ClassVar[str]
    label: ClassVar[str]  # display name in figures and tables
    order: ClassVar[int]  # rank in legends
    color: ClassVar[str]  # its hue in figures
    hooks: ClassVar[frozenset[str]] = frozenset()  # which of embed/rotate/bias/contextual
    # what claims and figures group encodings by (`attributes`), never their names:
    # "absolute" (added to the input), "relative" (a function of query-key distance),
    # "contextual" (positions counted from the content), "none"
    family: ClassVar[str] = "none"
    learned: ClassVar[bool] = False  # has trainable parameters of its own
    # logits unchanged when every position moves by one offset
    shift_invariant: ClassVar[bool] = True
    # evaluated under the registered RoPE scaling methods: set by the rotary family
    # (`rotary.RotaryConfig`), whose frequencies a scaling recomputes
    supports_scaling: ClassVar[bool] = False
    takes_positions: ClassVar[bool] = True  # False: positions are ignored (randomising is moot)
    # its parameters' shapes depend on `max_length` (a learned table): then the table length is
    # part of the trial id, since the eval lengths can set it
    sized_by_length: ClassVar[bool] = False

    @classmethod
    def attributes(cls) -> dict[str, str | bool]:
        """What claims and plots select encodings by: family, rotary (a q/k rotation that the
        scalings act on), additive_bias (a logit bias, contextual included), learned,
        shift_invariant."""
        return {
            "family": cls.family,
            "rotary": cls.supports_scaling,
            "additive_bias": bool(cls.hooks & {"bias", "contextual"}),
            "learned": cls.learned,
            "shift_invariant": cls.shift_invariant,
        }

    def trained_scaling(self) -> tuple[str, float, tuple] | None:
        """(method, factor, params) of the scaling the encoding trains under, or None when no
        scaling acts on it."""
        return None

    def layer_tag(self) -> str:
        """What a layer kind with its own copy of this encoding adds to its name in trial ids
        (a rotary base: '1e+06')."""
        return ""

    def build(
        self, model: ModelConfig, *, max_length: int, train_length: int, key: PRNGKeyArray
    ) -> PositionEncoding:
        """The encoding module for a model; `max_length` sizes position tables."""
        raise NotImplementedError

    def n_params(self, model: ModelConfig, *, max_length: int) -> int:
        """Trainable scalars the encoding adds to the model."""
        return 0

    def bias_floats_per_pair(self, model: ModelConfig) -> int:
        """float32 values the bias hook holds per query-key pair of a block (memory estimate)."""
        return model.n_heads if "bias" in self.hooks else 0

    def extra_flops(self, model: ModelConfig, length: int) -> int:
        """Forward FLOPs one layer spends on the encoding beyond the q k^T and A V matmuls, for
        one sequence of `length` (`sweep plan`'s cost estimate; the base counts none)."""
        return 0

    def check(self, trial: TrialConfig, path: str) -> None:
        """Raise ConfigError (naming `path` and the key) if the config does not fit the trial.

        The base checks what every encoding shares: randomised positions and the names of
        the evaluation scalings (which only `supports_scaling` encodings run).
        """
        check_randomized(trial)
        for name, _ in trial.eval.method_params:
            known_scaling(name, f"eval.method_params.{name}")
        for i, method in enumerate(trial.eval.methods):
            known_scaling(method, f"eval.methods[{i}]")

    def with_scaling(
        self,
        encoding: PositionEncoding,
        model: ModelConfig,
        *,
        train_length: int,
        kind: str,
        factor: float,
        params: dict | None,
        seq_len: int | None,
    ) -> PositionEncoding:
        """The encoding under scaling `kind` at `factor` (only if `supports_scaling`)."""
        raise NotImplementedError(f"{self.name} does not support RoPE scaling")

    def slug(self) -> str:
        """Suffix of the trial id's readable part (e.g. RoPE's training-time scaling)."""
        return ""


def known_scaling(method: str, path: str) -> None:
    """ConfigError naming `path` unless `method` is a registered RoPE scaling method."""
    if method not in rope.ROPE_KINDS:
        raise ConfigError(
            f"{path}: unknown scaling {method!r}; allowed: {', '.join(rope.ROPE_KINDS)}"
        )

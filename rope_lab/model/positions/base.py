"""The position-encoding interface: four hooks, a frozen-buffer wrapper, and the config base.

Each encoding is an Equinox module with three hooks that take explicit (possibly offset or
randomised) positions, and one that takes queries and their logits:

- `embed(positions (*B, L))`: a (*B, L, D) vector added to the token embeddings, or None;
- `rotate(q, k, positions (L,))`: q and k of shape (L, H, Dh) after rotation (RoPE), or unchanged;
  under a relative-position remap (`positions/remapped.py`) one rotation per position set,
  (S, L, H, Dh), with `remap_choice(q_positions (Lq,), k_positions (Lk,))` the (Lq, Lk) set
  each pair is scored in (None for every other encoding);
- `bias(q_positions (Lq,), k_positions (Lk,))`: an additive (H, Lq, Lk) attention-logit bias for
  one block of queries against one block of keys, or None. Attention asks only for the blocks it
  computes, so no encoding ever builds an (H, L, L) array for the whole sequence;
- `contextual_bias(q (H, Lq, Dh), logits (H, Lq, Lk), visible (Lq, Lk))`: an additive
  (H, Lq, Lk) term computed from one block of queries and their logits against the whole key
  prefix (CoPE's gated counts), or None. Only the reference attention path calls it: it needs
  every key of a query's row at once.

Each encoding has a typed, frozen config registered under its `kind` (`registry.POSITIONS`):
its own fields, its validation, and what the rest of rope_lab asks of it as class attributes
(`supports_scaling`, `hooks`, `takes_positions`, plot `label`/`order`/`color`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from rope_lab.model import rope
from rope_lab.model.positions.randomized import check_randomized
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.config import ModelConfig, TrialConfig


class Frozen(eqx.Module):
    """A non-trainable array (excluded from optimisation and from the NTK parameters)."""

    value: Array

    def get(self) -> Array:
        """The array, with gradients stopped."""
        return jax.lax.stop_gradient(self.value)


class PositionEncoding(eqx.Module):
    """Base class: no position information anywhere (NoPE)."""

    def embed(self, positions: Array) -> Float[Array, "*B L D"] | None:
        """Additive input embedding for positions (*B, L), or None."""
        return None

    def rotate(
        self, q: Float[Array, "L H Dh"], k: Float[Array, "L H Dh"], positions: Array
    ) -> tuple[Array, Array]:
        """Queries and keys after the position transform."""
        return q, k

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"] | None:
        """Additive logit bias of queries at q_positions (Lq,) for keys at k_positions (Lk,)."""
        return None

    def remap_choice(self, q_positions: Array, k_positions: Array) -> Int[Array, "Lq Lk"] | None:
        """Under a remap, the position set (Lq, Lk) each pair is scored in; else None."""
        return None

    def contextual_bias(
        self,
        q: Float[Array, "H Lq Dh"],
        logits: Float[Array, "H Lq Lk"],
        visible: Bool[Array, "Lq Lk"],
    ) -> Float[Array, "H Lq Lk"] | None:
        """Additive logit term of queries q (H, Lq, Dh) given their float32 logits
        q k^T * scale (+ bias) against keys 0..Lk-1 (H, Lq, Lk) and the pairs attention keeps
        (Lq, Lk), or None. Attention adds it before any row scale and the mask."""
        return None


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

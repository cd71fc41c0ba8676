"""Learned absolute position embeddings: a trained (max_length, D) table added to the input."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from rope_lab.model.positions.base import EncodingConfig, PositionEncoding
from rope_lab.registry import POSITIONS
from rope_lab.typed import ConfigError


class LearnedPE(PositionEncoding):
    """Learned absolute table of shape (max_length, D); untrained rows keep their init."""

    table: Float[Array, "P D"]

    def __init__(self, max_length: int, width: int, *, key: PRNGKeyArray, std: float = 1.0):
        self.table = std * jax.random.normal(key, (max_length, width))

    def embed(self, positions: Array) -> Float[Array, "*B L D"]:
        """Rows of the table at integer positions (*B, L)."""
        return self.table[positions.astype(jnp.int32)]


@POSITIONS.register("learned")
@dataclass(frozen=True)
class LearnedConfig(EncodingConfig):
    """Learned table; its size is `model.position.max_length` (default: the longest length)."""

    label = "learned"
    order = 1
    color = "#ff7f0e"
    hooks = frozenset({"embed"})
    family = "absolute"
    learned = True
    shift_invariant = False
    sized_by_length = True

    def build(self, model, *, max_length, train_length, key) -> LearnedPE:
        """A (max_length, width) table drawn from N(0, 1)."""
        return LearnedPE(max_length, model.width, key=key)

    def n_params(self, model, *, max_length) -> int:
        """max_length x width."""
        return max_length * model.width

    def check(self, trial, path) -> None:
        """The table must cover every evaluated length."""
        super().check(trial, path)
        size, longest = trial.model.position.max_length, max(trial.eval_lengths)
        if size is not None and size < longest:
            raise ConfigError(
                f"model.position.max_length: {size} is shorter than the longest "
                f"evaluated length {longest}"
            )

"""Learned absolute position embeddings: a trained (max_length, D) table added to the input.
The config; the table's module is `modules/learned.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.learned import LearnedPE


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
        from rope_lab.model.positions.modules.learned import LearnedPE  # deferred: imports JAX

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

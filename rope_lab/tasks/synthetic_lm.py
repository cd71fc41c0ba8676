"""Language modelling on a synthetic Markov source with long-range copies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rope_lab.registry import TASKS
from rope_lab.roles import identity
from rope_lab.tasks.base import (
    Batch,
    Operands,
    Task,
    TaskParams,
    check_float,
    check_int,
    check_split,
)

if TYPE_CHECKING:
    import jax

_SOURCE_CACHE: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}


@TASKS.register("lm_synthetic")
@dataclass(frozen=True)
class SyntheticLMParams(TaskParams):
    """The parameters of :class:`SyntheticLMTask` (see there)."""

    branching: int = identity(4)
    copy_prob: float = identity(0.02)
    span_length: int = identity(16)
    min_lag: int = identity(32)
    seed: int = identity(0)
    display_name: ClassVar[str] = "synthetic LM"
    order: ClassVar[int] = 4
    default_metric: ClassVar[str] = "loss"


@dataclass(frozen=True)
class SyntheticLMTask(SyntheticLMParams, Task):
    """Language modelling on a synthetic source with long-range structure.

    Vocabulary: all V = vocab_size tokens are ordinary tokens.

    The source is a sparse random Markov chain: token v has ``branching`` successors
    ``successors[v]`` (uniform over the vocabulary, drawn with ``numpy.random.default_rng(seed)``)
    with Dirichlet(1) transition probabilities, so all batches share one source. The first token
    is uniform. At each later position t >= min_lag that is not inside a copy, a copy starts with
    probability ``copy_prob``: the next ``span_length`` tokens repeat the tokens at lag
    ``uniform{min_lag, ..., t}`` (so the lag distribution widens with length and long context
    helps). Otherwise the token is drawn from the chain. Every target is defined, so all
    positions are scored. ``min_length = 1``.
    """

    def _check_params(self) -> None:
        check_int(self, "branching", 1)
        check_float(self, "copy_prob", 0.0, 1.0)
        check_int(self, "span_length", 1)
        check_int(self, "min_lag", 1)
        check_int(self, "seed", 0)

    def min_vocab_size(self) -> int:
        return 2

    def _vocab_explanation(self) -> str:
        return "at least two tokens"

    def min_length(self) -> int:
        return 1

    def transition_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The Markov source: successors (V, branching) int32, probabilities (V, branching)."""
        cache_key = (self.vocab_size, self.branching, self.seed)
        if cache_key not in _SOURCE_CACHE:
            rng = np.random.default_rng(self.seed)
            successors = rng.integers(
                0, self.vocab_size, (self.vocab_size, self.branching), dtype=np.int32
            )
            probs = rng.dirichlet(np.ones(self.branching), self.vocab_size).astype(np.float32)
            successors.setflags(write=False)
            probs.setflags(write=False)
            _SOURCE_CACHE[cache_key] = (successors, probs)
        return _SOURCE_CACHE[cache_key]

    def operands(self, split: str = "train") -> Operands:
        from rope_lab.tasks.sampling.synthetic_lm import operands  # deferred: imports JAX

        check_split(split)
        return operands(self)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.synthetic_lm`)."""
        from rope_lab.tasks.sampling.synthetic_lm import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

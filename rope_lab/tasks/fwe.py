"""Frequent words extraction, RULER-style (Hsieh et al. 2024): the k most frequent words of
a list drawn from a Zipf law."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rope_lab.registry import TASKS
from rope_lab.roles import identity
from rope_lab.tasks.base import (
    Batch,
    Operands,
    Task,
    TaskParams,
    check_float,
    check_int,
)
from rope_lab.tasks.words import WordVocabulary

if TYPE_CHECKING:
    import jax


@TASKS.register("fwe")
@dataclass(frozen=True)
class FrequentWordsParams(TaskParams):
    """The parameters of :class:`FrequentWordsTask` (see there)."""

    num_frequent: int = identity(3)
    alpha: float = identity(2.0)
    word_vocab: int = identity(32)
    display_name: ClassVar[str] = "frequent words"
    order: ClassVar[int] = 10
    answer_at_end: ClassVar[bool] = True


@dataclass(frozen=True)
class FrequentWordsTask(WordVocabulary, FrequentWordsParams, Task):
    """Frequent words extraction: n = L - k words drawn i.i.d. from a Zipf law (the word of
    rank r with probability proportional to r^-``alpha``, ranks given to the words in a random
    order per sequence); the answer is the k = ``num_frequent`` most frequent words, most
    frequent first, ties by first appearance (``Counter.most_common``), then, when fewer than
    k words occur (short lists), absent words, lowest id first.

    Vocabulary: 0 QUERY, [1, 1 + word_vocab) words. Sequence ``w_1 .. w_n QUERY a_1 .. a_k``;
    the last k positions are scored. ``min_length = 2 k``.
    """

    def _check_params(self) -> None:
        check_int(self, "num_frequent", 1)
        check_float(self, "alpha", 0.0, 100.0)
        check_int(self, "word_vocab", 1)
        if self.word_vocab < self.num_frequent:
            raise ValueError(
                f"fwe: word_vocab must be >= num_frequent={self.num_frequent}, got "
                f"word_vocab={self.word_vocab}"
            )

    def probabilities(self) -> list[float]:
        """P(rank r) for r = 1 .. word_vocab, proportional to r^-alpha."""
        weights = [r**-self.alpha for r in range(1, self.word_vocab + 1)]
        return [w / sum(weights) for w in weights]

    def min_length(self) -> int:
        return 2 * self.num_frequent

    def _min_length_explanation(self) -> str:
        return f"num_frequent={self.num_frequent} words and the answer"

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.fwe`)."""
        from rope_lab.tasks.sampling.fwe import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

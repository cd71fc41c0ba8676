"""Common words extraction, RULER-style (Hsieh et al. 2024): the k words that appear most
often in a list of words, the others rarer by a set ratio."""

from __future__ import annotations

import math
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


@TASKS.register("cwe")
@dataclass(frozen=True)
class CommonWordsParams(TaskParams):
    """The parameters of :class:`CommonWordsTask` (see there)."""

    num_common: int = identity(3)
    common_ratio: float = identity(4.0)
    word_vocab: int = identity(32)
    display_name: ClassVar[str] = "common words"
    order: ClassVar[int] = 9
    answer_at_end: ClassVar[bool] = True


@dataclass(frozen=True)
class CommonWordsTask(WordVocabulary, CommonWordsParams, Task):
    """Common words extraction: a list of n = L - k words in which k = ``num_common`` words
    each appear c times and every other word at most about c / ``common_ratio`` times; the
    answer is the k common words in the order they first appear (``Counter.most_common``).

    Vocabulary: 0 QUERY, [1, 1 + word_vocab) words (ids above are unused). Sequence of L+1
    tokens ``w_1 .. w_n QUERY a_1 .. a_k``; the last k positions are scored.

    Length-generic counts (`counts`): with U = word_vocab - k other words and r =
    ``common_ratio``, c = min(floor(n / k), max(2, ceil(r n / (U + r k)))); the other n - k c
    slots cycle through a random order of the U other words, so each appears
    floor or ceil((n - k c) / U) < c times. The list is shuffled. ``min_length = 3 k``.
    """

    def _check_params(self) -> None:
        check_int(self, "num_common", 1)
        check_float(self, "common_ratio", 1.0, math.inf, low_open=True)
        check_int(self, "word_vocab", 1)
        if self.word_vocab <= self.num_common:
            raise ValueError(
                f"cwe: word_vocab must be > num_common={self.num_common}, got "
                f"word_vocab={self.word_vocab}"
            )

    def counts(self, length: int) -> tuple[int, int]:
        """(c, u): how often each common word appears and the most any other does, at L."""
        n, k, others = length - self.num_common, self.num_common, self.word_vocab - self.num_common
        c = min(n // k, max(2, math.ceil(self.common_ratio * n / (others + self.common_ratio * k))))
        return c, -(-(n - k * c) // others)

    def min_length(self) -> int:
        return 3 * self.num_common

    def _min_length_explanation(self) -> str:
        return f"each of num_common={self.num_common} words twice, and the answer"

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        c, u = self.counts(int(length))
        if u >= c:
            raise ValueError(
                f"cwe: at length={length} the common words appear {c} times and others up to "
                f"{u}: raise common_ratio={self.common_ratio} or word_vocab={self.word_vocab}"
            )

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.cwe`)."""
        from rope_lab.tasks.sampling.cwe import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

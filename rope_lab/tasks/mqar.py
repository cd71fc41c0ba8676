"""Multi-query associative recall (Arora et al., 2023, "Zoology")."""

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

if TYPE_CHECKING:
    import jax


@TASKS.register("mqar")
@dataclass(frozen=True)
class MQARParams(TaskParams):
    """The parameters of :class:`MQARTask` (see there)."""

    num_pairs: int = identity(8)
    pair_density: float = identity(0.0)
    display_name: ClassVar[str] = "MQAR"
    order: ClassVar[int] = 1


@dataclass(frozen=True)
class MQARTask(MQARParams, Task):
    """Multi-query associative recall (Arora et al., 2023, "Zoology").

    Vocabulary layout (V = vocab_size, K = (V - 2) // 2)::

        0               FILL (gap token between queries)
        1               SEP (end of the key-value section)
        [2, 2 + K)      keys
        [2 + K, V)      values

    Sequence of L+1 tokens, with P pairs (distinct keys, i.i.d. values)::

        k_1 v_1 .. k_P v_P SEP  [query region]

    The query region is cut into two-token slots; P random slots hold ``k_j v_j`` (every pair is
    queried once, in random order) and the rest hold ``FILL FILL`` (one trailing FILL if the
    region has odd length). Scored: the query-key positions, whose target is the value.

    Number of pairs: ``P(L) = max(num_pairs, floor(pair_density * L))``; with the default
    ``pair_density = 0`` it is fixed, with e.g. ``pair_density = 1/16`` it scales with length.
    ``min_length = 4 * num_pairs``; needs ``K >= P(L)``, i.e. ``vocab_size >= 2 + 2 P(L)``.
    """

    FILL: ClassVar[int] = 0
    SEP: ClassVar[int] = 1
    KEY_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        check_int(self, "num_pairs", 1)
        check_float(self, "pair_density", 0.0, 0.25)

    @property
    def num_keys(self) -> int:
        """Size K of the key sub-vocabulary."""
        return (self.vocab_size - 2) // 2

    @property
    def value_start(self) -> int:
        """First value token id."""
        return self.KEY_START + self.num_keys

    def pairs_for(self, length: int) -> int:
        """Number of key-value pairs P(L) at sequence length L."""
        return max(self.num_pairs, math.floor(self.pair_density * length))

    def min_vocab_size(self) -> int:
        return 2 + 2 * self.num_pairs

    def _vocab_explanation(self) -> str:
        return f"FILL, SEP and >= num_pairs={self.num_pairs} keys and values each"

    def min_length(self) -> int:
        return 4 * self.num_pairs

    def _min_length_explanation(self) -> str:
        return f"num_pairs={self.num_pairs} pairs, SEP and one query slot per pair"

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        pairs = self.pairs_for(int(length))
        if self.num_keys < pairs:
            raise ValueError(
                f"{self.name}: vocab_size={self.vocab_size} is too small for {pairs} pairs at "
                f"length={length} (pair_density={self.pair_density}), need vocab_size >= "
                f"{2 + 2 * pairs}"
            )

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.mqar`)."""
        from rope_lab.tasks.sampling.mqar import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

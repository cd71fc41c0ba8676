"""Flip-flop language modelling (Liu et al., 2023, "Exposing attention glitches")."""

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
)

if TYPE_CHECKING:
    import jax


@TASKS.register("flipflop")
@dataclass(frozen=True)
class FlipFlopParams(TaskParams):
    """The parameters of :class:`FlipFlopTask` (see there)."""

    p_ignore: float = identity(0.8)
    display_name: ClassVar[str] = "flip-flop"
    order: ClassVar[int] = 3


@dataclass(frozen=True)
class FlipFlopTask(FlipFlopParams, Task):
    """Flip-flop language modelling (Liu et al., 2023, "Exposing attention glitches").

    Vocabulary layout (ids >= 5 are unused)::

        0 w (write)   1 r (read)   2 i (ignore)   3 bit "0"   4 bit "1"

    Sequence of L+1 tokens: instruction/bit pairs ``x_1 b_1 x_2 b_2 ...`` (instructions at even
    positions, truncated to L+1 tokens). ``x_1 = w``; afterwards ``P(i) = p_ignore`` and
    ``P(w) = P(r) = (1 - p_ignore) / 2``. Bits after w and i are uniform; the bit after r equals
    the most recently written bit. Scored: exactly the positions holding r (target = read bit).
    ``min_length = 3``.
    """

    W: ClassVar[int] = 0
    R: ClassVar[int] = 1
    I: ClassVar[int] = 2  # noqa: E741
    ZERO: ClassVar[int] = 3
    ONE: ClassVar[int] = 4

    def _check_params(self) -> None:
        check_float(self, "p_ignore", 0.0, 1.0)

    def min_vocab_size(self) -> int:
        return 5

    def _vocab_explanation(self) -> str:
        return "w, r, i, 0, 1"

    def min_length(self) -> int:
        return 3

    def _min_length_explanation(self) -> str:
        return "the initial write and one more instruction with its bit"

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.flipflop`)."""
        from rope_lab.tasks.sampling.flipflop import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

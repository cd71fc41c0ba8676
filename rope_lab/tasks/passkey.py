"""Passkey retrieval: find a needle hidden in filler and repeat it at the end."""

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

if TYPE_CHECKING:
    import jax


@TASKS.register("passkey")
@dataclass(frozen=True)
class PasskeyParams(TaskParams):
    """The parameters of :class:`PasskeyTask` (see there)."""

    needle_length: int = identity(4)
    num_digits: int = identity(10)
    depth: float | None = identity(None)
    display_name: ClassVar[str] = "passkey"
    order: ClassVar[int] = 0
    answer_at_end: ClassVar[bool] = True
    has_depth: ClassVar[bool] = True


@dataclass(frozen=True)
class PasskeyTask(PasskeyParams, Task):
    """Passkey retrieval: find a needle hidden in filler and repeat it at the end.

    Vocabulary layout (V = vocab_size)::

        0                        KEY marker (precedes the needle inside the filler)
        1                        QUERY marker (precedes the answer at the end)
        [2, 2 + num_digits)      needle "digits"
        [2 + num_digits, V)      filler tokens (i.i.d. uniform)

    Sequence of L+1 tokens::

        filler.. KEY n_1..n_k filler.. QUERY n_1..n_k

    The ``KEY n_1..n_k`` block starts at a uniformly random position of the prefix (or at the
    relative position ``depth`` in [0, 1] if given). The answer is the last k tokens, so exactly
    the last ``k = needle_length`` positions are scored (position ``L - k`` holds QUERY and must
    predict n_1). ``min_length = 2 * needle_length + 1``.
    """

    KEY: ClassVar[int] = 0
    QUERY: ClassVar[int] = 1
    DIGIT_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        check_int(self, "needle_length", 1)
        check_int(self, "num_digits", 1)
        if self.depth is not None:
            check_float(self, "depth", 0.0, 1.0)

    @property
    def filler_start(self) -> int:
        """First filler token id."""
        return self.DIGIT_START + self.num_digits

    def min_vocab_size(self) -> int:
        return self.filler_start + 1

    def _vocab_explanation(self) -> str:
        return f"2 markers + num_digits={self.num_digits} needle tokens + >= 1 filler token"

    def min_length(self) -> int:
        return 2 * self.needle_length + 1

    def _min_length_explanation(self) -> str:
        return f"key block and answer of needle_length={self.needle_length} tokens each + marker"

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.passkey`)."""
        from rope_lab.tasks.sampling.passkey import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

"""Copy / induction: a marked random segment, a separator, then the segment again."""

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


@TASKS.register("copy")
@dataclass(frozen=True)
class CopyParams(TaskParams):
    """The parameters of :class:`CopyTask` (see there)."""

    segment_fraction: float = identity(0.5)
    segment_length: int | None = identity(None)
    display_name: ClassVar[str] = "copy"
    order: ClassVar[int] = 2
    answer_at_end: ClassVar[bool] = True


@dataclass(frozen=True)
class CopyTask(CopyParams, Task):
    """Copy / induction: a marked random segment, a separator, then the segment again.

    Vocabulary layout (V = vocab_size)::

        0             BEGIN (marks the start of the segment)
        1             SEP (marks the start of the copy)
        [2, V)        content tokens (i.i.d. uniform)

    Sequence of L+1 tokens, segment length m::

        content.. BEGIN s_1..s_m SEP s_1..s_m

    The random content prefix has length ``L - 1 - 2m`` (possibly 0). Scored: the last m
    positions (SEP predicts s_1, ..., s_{m-1} predicts s_m). By default the segment scales with
    length, ``m = max(1, floor(segment_fraction * (L - 1)))`` with ``segment_fraction`` in
    (0, 0.5], so longer sequences need longer-range copying (copy distance m + 1); a fixed
    ``segment_length`` overrides this. ``min_length`` is 3, or ``2 * segment_length + 1``.
    """

    BEGIN: ClassVar[int] = 0
    SEP: ClassVar[int] = 1
    CONTENT_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        check_float(self, "segment_fraction", 0.0, 0.5, low_open=True)
        if self.segment_length is not None:
            check_int(self, "segment_length", 1)

    def segment_length_for(self, length: int) -> int:
        """Segment length m at sequence length L."""
        if self.segment_length is not None:
            return self.segment_length
        return max(1, math.floor(self.segment_fraction * (length - 1)))

    def min_vocab_size(self) -> int:
        return self.CONTENT_START + 1

    def _vocab_explanation(self) -> str:
        return "BEGIN, SEP and >= 1 content token"

    def min_length(self) -> int:
        m = 1 if self.segment_length is None else self.segment_length
        return 2 * m + 1

    def _min_length_explanation(self) -> str:
        m = 1 if self.segment_length is None else self.segment_length
        return f"BEGIN, SEP and two copies of a segment of {m} tokens"

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.copy`)."""
        from rope_lab.tasks.sampling.copy import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

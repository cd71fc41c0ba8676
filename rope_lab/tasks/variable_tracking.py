"""Variable tracking, RULER-style (Hsieh et al. 2024): chains of assignments hidden in a
haystack; the answer is every variable bound to the asked value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rope_lab.registry import TASKS
from rope_lab.roles import identity
from rope_lab.tasks import haystack as hs
from rope_lab.tasks.base import (
    Batch,
    Operands,
    Task,
    TaskParams,
    check_int,
    check_split,
)

if TYPE_CHECKING:
    import jax


@TASKS.register("variable_tracking")
@dataclass(frozen=True)
class VariableTrackingParams(TaskParams):
    """The parameters of :class:`VariableTrackingTask` (see there)."""

    num_hops: int = identity(4)
    num_chains: int = identity(2)
    var_vocab: int = identity(16)
    value_vocab: int = identity(16)
    haystack: str = identity("noise")
    display_name: ClassVar[str] = "variable tracking"
    order: ClassVar[int] = 8
    answer_at_end: ClassVar[bool] = True


@dataclass(frozen=True)
class VariableTrackingTask(hs.MarkedLayout, VariableTrackingParams, Task):
    """Variable tracking: C = ``num_chains`` chains of k = ``num_hops`` assignments each,
    ``VAR x_1 v``, ``VAR x_2 x_1``, ..., ``VAR x_k x_{k-1}``, hidden in a haystack; the first
    chain's value is asked and the answer is x_1 .. x_k, every variable bound to it, in the
    order they are assigned. The other chains (other variables, another value) distract.

    Vocabulary (base = 0 for a noise haystack, 256 for a text one)::

        base, base+1, base+2       VAR, QUERY, ANSWER markers
        [base+3, +var_vocab)       variable names (C k distinct per sequence)
        [.., +value_vocab)         values (C distinct per sequence)
        [.., V)                    noise filler (noise haystack only)

    Sequence of L+1 tokens::

        haystack.. QUERY v ANSWER x_1 .. x_k

    Scored: the last k positions (ANSWER predicts x_1). Each statement (3 tokens) is an item of
    the haystack (`haystack.insert`) at uniform random offsets; a chain's statements keep their
    order, the chains are interleaved at random. ``min_length = 3 C k + k + 2``.
    """

    def _check_params(self) -> None:
        for name in ("num_hops", "num_chains", "var_vocab", "value_vocab"):
            check_int(self, name, 1)
        if self.var_vocab < self.num_chains * self.num_hops:
            raise ValueError(
                f"variable_tracking: var_vocab must be >= num_chains x num_hops = "
                f"{self.num_chains * self.num_hops} (distinct variables), got "
                f"var_vocab={self.var_vocab}"
            )
        if self.value_vocab < self.num_chains:
            raise ValueError(
                f"variable_tracking: value_vocab must be >= num_chains={self.num_chains} "
                f"(distinct values), got value_vocab={self.value_vocab}"
            )
        if not isinstance(self.haystack, str):
            raise ValueError(f"variable_tracking: haystack must be a string, got {self.haystack!r}")
        if not hs.is_noise(self.haystack):
            hs.haystack_text(self.haystack)

    @property
    def VAR(self) -> int:
        """The marker of an assignment ``VAR name source``."""
        return self.base

    @property
    def var_start(self) -> int:
        """First variable-name id."""
        return self.first_id

    @property
    def value_start(self) -> int:
        """First value id."""
        return self.var_start + self.var_vocab

    @property
    def filler_start(self) -> int:
        """First noise-filler id."""
        return self.value_start + self.value_vocab

    def filler_length(self, length: int) -> int:
        """Filler tokens F of the haystack at sequence length L."""
        return length - 2 - self.num_hops - 3 * self.num_chains * self.num_hops

    def min_vocab_size(self) -> int:
        return self.filler_start + (1 if hs.is_noise(self.haystack) else 0)

    def _vocab_explanation(self) -> str:
        return f"3 markers + var_vocab={self.var_vocab} + value_vocab={self.value_vocab} + filler"

    def min_length(self) -> int:
        return 3 * self.num_chains * self.num_hops + self.num_hops + 2

    def _min_length_explanation(self) -> str:
        return f"{self.num_chains * self.num_hops} statements of 3 tokens, query and answer"

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        if not hs.is_noise(self.haystack):
            size, need = hs.haystack_text(self.haystack).size, self.filler_length(int(length))
            if size < need:
                raise ValueError(
                    f"variable_tracking: haystack={self.haystack!r} has {size} bytes, too few "
                    f"for length={length} (needs {need})"
                )

    def operands(self, split: str = "train") -> Operands:
        """The haystack text on the device (the same for both splits), none for noise."""
        from rope_lab.tasks.sampling.haystack import text_operand  # deferred: imports JAX

        check_split(split)
        return () if hs.is_noise(self.haystack) else (text_operand(self.haystack),)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.variable_tracking`)."""
        from rope_lab.tasks.sampling.variable_tracking import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

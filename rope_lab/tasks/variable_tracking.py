"""Variable tracking, RULER-style (Hsieh et al. 2024): chains of assignments hidden in a
haystack; the answer is every variable bound to the asked value."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp

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
    finish,
    random_bits,
)


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
        check_split(split)
        return () if hs.is_noise(self.haystack) else (hs.text_operand(self.haystack),)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        c_all, k = self.num_chains, self.num_hops
        n_items = c_all * k
        n_fill = self.filler_length(length)
        k_fill, k_rest = jax.random.split(key)
        sizes = (self.var_vocab, self.value_vocab, n_items, n_items)
        bits = random_bits(k_rest, (batch_size, sum(sizes)))
        b_var, b_val, b_order, b_place = (
            bits[:, a:b] for a, b in itertools.pairwise((0, *itertools.accumulate(sizes)))
        )
        names = jnp.argsort(b_var, axis=1)[:, :n_items].astype(jnp.int32) + self.var_start
        names = names.reshape(batch_size, c_all, k)  # names[c, i]: chain c's i-th variable
        values = jnp.argsort(b_val, axis=1)[:, :c_all].astype(jnp.int32) + self.value_start
        # chains interleaved at random; a chain's i-th statement is its i-th appearance
        chain = jnp.argsort(b_order, axis=1).astype(jnp.int32) // k  # (B, C k)
        same = chain[:, :, None] == chain[:, None, :]
        earlier = jnp.tril(jnp.ones((n_items, n_items), bool), -1)
        hop = jnp.sum(same & earlier[None], axis=2).astype(jnp.int32)
        rows = jnp.arange(batch_size)[:, None]
        target = names[rows, chain, hop]
        source = jnp.where(
            hop == 0,
            jnp.take_along_axis(values, chain, axis=1),
            names[rows, chain, jnp.maximum(hop - 1, 0)],
        )
        marker = jnp.full_like(target, self.VAR)
        contents = jnp.stack([marker, target, source], axis=2).reshape(batch_size, 3 * n_items)
        offsets = hs.random_offsets(b_place, n_fill)
        lengths = jnp.full((batch_size, n_items), 3, jnp.int32)
        text = operands[0] if operands else None
        fill = hs.filler(k_fill, batch_size, n_fill, self.filler_start, self.vocab_size, text)
        hay = hs.insert(fill, offsets, lengths, contents)
        seq = jnp.concatenate(
            [
                hay,
                jnp.full((batch_size, 1), self.QUERY, jnp.int32),
                values[:, :1],
                jnp.full((batch_size, 1), self.ANSWER, jnp.int32),
                names[:, 0],
            ],
            axis=1,
        )
        mask = jnp.arange(length) >= length - k
        return finish(seq, mask[None, :])

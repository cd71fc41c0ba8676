"""Needle in a haystack, RULER-style (Hsieh et al. 2024): single, multi-key, multi-value and
multi-query retrieval from a haystack of noise or of real text, at a chosen depth."""

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
    check_float,
    check_int,
    check_split,
)

if TYPE_CHECKING:
    import jax


@TASKS.register("niah")
@dataclass(frozen=True)
class NeedleParams(TaskParams):
    """The parameters of :class:`NeedleTask` (see there)."""

    num_keys: int = identity(1)
    num_values: int = identity(1)
    num_queries: int = identity(1)
    value_length: int = identity(2)
    key_vocab: int = identity(16)
    value_vocab: int = identity(16)
    haystack: str = identity("noise")
    depth: float | None = identity(None)
    display_name: ClassVar[str] = "needle (RULER)"
    order: ClassVar[int] = 7
    answer_at_end: ClassVar[bool] = True
    has_depth: ClassVar[bool] = True


@dataclass(frozen=True)
class NeedleTask(hs.MarkedLayout, NeedleParams, Task):
    """Needle in a haystack, RULER-style: K keys are hidden in a haystack, each bound to V values
    (one needle ``NEEDLE key v_1..v_w`` per value); Q of the keys are asked at the end and the
    answer is every value of each asked key.

    RULER's variants are parameter sets: single (K = V = Q = 1, the defaults), multi-key
    (``num_keys`` K > 1: the other keys' needles are distractors), multi-value (``num_values``
    V > 1: all V values must be returned) and multi-query (``num_queries`` Q > 1).

    Vocabulary (base = 0 for a noise haystack, 256 for a text one, whose bytes are tokens
    0..255)::

        base, base+1, base+2       NEEDLE, QUERY, ANSWER markers
        [base+3, +key_vocab)       keys (K distinct per sequence)
        [.., +value_vocab)         value tokens (i.i.d.)
        [.., V)                    noise filler (i.i.d. uniform; noise haystack only)

    Sequence of L+1 tokens::

        haystack.. QUERY q_1..q_Q ANSWER vals(q_1) .. vals(q_Q)

    where vals(q) is the V values of key q, w = ``value_length`` tokens each, in the order its
    needles appear in the haystack. The answer (m = Q V w tokens) is the end of the sequence
    and its m positions are the scored ones (ANSWER predicts the first token).

    The haystack holds H = L - 1 - Q - m tokens: filler (``haystack: noise``, or a window of
    the text ``builtin:python-docs`` or a file path, the same text for both splits: the
    answer is never in it) with the needles inserted. The Q V needles of the asked keys sit
    together, in random order, as one block; each of the (K - Q) V distractor needles is an
    item of its own. With ``depth`` None every item (the block, each distractor) is placed
    uniformly at random; with ``depth`` d in [0, 1] the block starts at token
    round(d (H - Q V (w + 2))) of the sequence (0: first, 1: just before the query) and the
    distractors are random around it (`haystack.depth_offsets`). ``eval.depths`` evaluates a
    model at several depths (`at_depth`), rows carrying ``depth``.
    """

    def _check_params(self) -> None:
        for name in ("num_keys", "num_values", "num_queries", "value_length"):
            check_int(self, name, 1)
        check_int(self, "key_vocab", 1)
        check_int(self, "value_vocab", 1)
        if self.num_queries > self.num_keys:
            raise ValueError(
                f"niah: num_queries must be <= num_keys={self.num_keys}, "
                f"got num_queries={self.num_queries}"
            )
        if self.key_vocab < self.num_keys:
            raise ValueError(
                f"niah: key_vocab must be >= num_keys={self.num_keys} (distinct keys), "
                f"got key_vocab={self.key_vocab}"
            )
        if not isinstance(self.haystack, str):
            raise ValueError(
                f"niah: haystack must be 'noise' or a text path, got {self.haystack!r}"
            )
        if not hs.is_noise(self.haystack):
            hs.haystack_text(self.haystack)  # readable
        if self.depth is not None:
            check_float(self, "depth", 0.0, 1.0)

    # -- layout --------------------------------------------------------------------------------
    @property
    def NEEDLE(self) -> int:
        """The marker before each needle's key."""
        return self.base

    @property
    def key_start(self) -> int:
        """First key id."""
        return self.first_id

    @property
    def value_start(self) -> int:
        """First value-token id."""
        return self.key_start + self.key_vocab

    @property
    def filler_start(self) -> int:
        """First noise-filler id (noise haystack)."""
        return self.value_start + self.value_vocab

    @property
    def needle_length(self) -> int:
        """Tokens of one needle: NEEDLE, key, w value tokens."""
        return 2 + self.value_length

    @property
    def answer_length(self) -> int:
        """Scored tokens m = Q V w."""
        return self.num_queries * self.num_values * self.value_length

    @property
    def block_length(self) -> int:
        """Tokens of the asked keys' needles (one block)."""
        return self.num_queries * self.num_values * self.needle_length

    @property
    def distractors(self) -> int:
        """Needles of keys not asked: (K - Q) V."""
        return (self.num_keys - self.num_queries) * self.num_values

    def haystack_length(self, length: int) -> int:
        """Tokens H before QUERY at sequence length L."""
        return length - 1 - self.num_queries - self.answer_length

    def filler_length(self, length: int) -> int:
        """Filler tokens F in the haystack at sequence length L."""
        return (
            self.haystack_length(length) - self.block_length - self.distractors * self.needle_length
        )

    def block_start(self, length: int, depth: float) -> int:
        """Token where the asked needles start at relative depth ``depth``."""
        return round(depth * (self.haystack_length(length) - self.block_length))

    def min_vocab_size(self) -> int:
        return self.filler_start + (1 if hs.is_noise(self.haystack) else 0)

    def _vocab_explanation(self) -> str:
        where = "1 noise token" if hs.is_noise(self.haystack) else "256 text bytes before them"
        return f"3 markers + key_vocab={self.key_vocab} + value_vocab={self.value_vocab} + {where}"

    def min_length(self) -> int:
        spare = self.needle_length if self.distractors else 0  # a distractor can move
        needles = self.block_length + self.distractors * self.needle_length
        return 1 + self.num_queries + self.answer_length + needles + spare

    def _min_length_explanation(self) -> str:
        return (
            f"query and answer, {self.num_queries * self.num_values + self.distractors} needles "
            f"of {self.needle_length} tokens, and filler for one needle to move"
            if self.distractors
            else "query, answer and the needles"
        )

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        if not hs.is_noise(self.haystack):
            size = hs.haystack_text(self.haystack).size
            need = self.filler_length(int(length))
            if size < need:
                raise ValueError(
                    f"niah: haystack={self.haystack!r} has {size} bytes, too few for length="
                    f"{length} (needs {need} filler bytes)"
                )

    def operands(self, split: str = "train") -> Operands:
        """The haystack text on the device (the same for both splits), none for noise."""
        from rope_lab.tasks.sampling.haystack import text_operand  # deferred: imports JAX

        check_split(split)
        return () if hs.is_noise(self.haystack) else (text_operand(self.haystack),)

    # -- sampling ------------------------------------------------------------------------------
    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.niah`)."""
        from rope_lab.tasks.sampling.niah import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)

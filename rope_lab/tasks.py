"""Deterministic, length-generic synthetic tasks for length-extrapolation experiments.

Every task produces a :class:`Batch` for a causal LM. A task first draws a sequence ``seq`` of
``length + 1`` real tokens (no padding), then ``tokens = seq[:, :-1]``, ``targets = seq[:, 1:]``
and ``mask`` marks the positions ``t`` whose prediction of ``targets[:, t]`` is scored.

Tasks are frozen dataclasses (hashable, so they can be static arguments of :func:`jax.jit`) and
are built by name with :func:`make_task`. :func:`sample_batch` validates and samples under jit.

Large, fixed arrays a task needs (the Markov source of ``lm_synthetic``, the bytes of
``lm_text``) are *operands*: :func:`sample_batch` passes them to the jitted sampler as arguments
instead of baking them into the compiled program as constants.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "TASKS",
    "Batch",
    "CopyTask",
    "FlipFlopTask",
    "MQARTask",
    "PasskeyTask",
    "SyntheticLMTask",
    "Task",
    "TextLMTask",
    "make_task",
    "sample_batch",
]

Operands = tuple[jax.Array, ...]


class Batch(NamedTuple):
    """One batch for a causal LM.

    tokens:  (B, L) int32, model input.
    targets: (B, L) int32, ``targets[:, t]`` is what position ``t`` predicts (= tokens shifted).
    mask:    (B, L) bool, which positions are scored.
    """

    tokens: jax.Array
    targets: jax.Array
    mask: jax.Array


# --------------------------------------------------------------------------------------------
# parameter checking helpers
# --------------------------------------------------------------------------------------------


def _check_int(task: Task, name: str, minimum: int | None = None) -> int:
    """Check that field ``name`` of ``task`` is an int >= ``minimum``; normalise it to ``int``."""
    value = getattr(task, name)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{task.name}: {name} must be an integer, got {name}={value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{task.name}: {name} must be >= {minimum}, got {name}={value}")
    object.__setattr__(task, name, value)
    return value


def _check_float(
    task: Task, name: str, low: float, high: float, *, low_open: bool = False
) -> float:
    """Check that field ``name`` is a real number in [low, high] (or (low, high]); make it float."""
    value = getattr(task, name)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{task.name}: {name} must be a number, got {name}={value!r}")
    value = float(value)
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value > high:
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{task.name}: {name} must be in {bracket}{low}, {high}], got {name}={value!r}"
        )
    object.__setattr__(task, name, value)
    return value


def _check_size(name: str, value: Any, check_positive: bool = True) -> int:
    """Check a static size argument (``length`` or ``batch_size``) is an int (>= 1)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {name}={value!r}")
    if check_positive and value < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={value}")
    return int(value)


SPLITS = ("train", "eval")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got split={split!r}")


def _random_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """All randomness of one batch from a single 1-D threefry call, reshaped to ``shape``.

    One flat call compiles several times faster on CPU than several or multi-dimensional calls.
    """
    return jax.random.bits(key, (math.prod(shape),), jnp.uint32).reshape(shape)


def _randint(bits: jax.Array, low: int, high: int | jax.Array) -> jax.Array:
    """Integers in [low, high) from uint32 ``bits`` (modulo bias <= (high - low) / 2**32)."""
    span = jnp.asarray(high - low).astype(jnp.uint32)
    return (bits % span).astype(jnp.int32) + low


def _uniform(bits: jax.Array) -> jax.Array:
    """Floats in [0, 1) with 24 random bits from uint32 ``bits``."""
    return (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def _finish(seq: jax.Array, mask: jax.Array) -> Batch:
    """Split a (B, L+1) sequence into tokens/targets; ``mask`` is (B, L) or broadcastable."""
    seq = seq.astype(jnp.int32)
    tokens, targets = seq[:, :-1], seq[:, 1:]
    return Batch(tokens, targets, jnp.broadcast_to(mask, tokens.shape).astype(bool))


# --------------------------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task(abc.ABC):
    """Base class of all tasks. ``vocab_size`` is the model vocabulary size V."""

    vocab_size: int
    name: ClassVar[str] = "task"

    def __post_init__(self) -> None:
        _check_int(self, "vocab_size", 1)
        self._check_params()
        need = self.min_vocab_size()
        if self.vocab_size < need:
            raise ValueError(
                f"{self.name}: vocab_size={self.vocab_size} is too small, need vocab_size >= "
                f"{need} ({self._vocab_explanation()})"
            )

    # -- to override --------------------------------------------------------------------------
    @abc.abstractmethod
    def _check_params(self) -> None:
        """Validate (and normalise) the task's own fields; raise ValueError naming the field."""

    @abc.abstractmethod
    def min_vocab_size(self) -> int:
        """Smallest vocab_size the task supports with its current parameters."""

    def _vocab_explanation(self) -> str:
        return "see the class docstring for the vocabulary layout"

    @abc.abstractmethod
    def min_length(self) -> int:
        """Shortest sequence length L the task can generate."""

    def _min_length_explanation(self) -> str:
        return ""

    def operands(self, split: str = "train") -> Operands:
        """Fixed device arrays the sampler needs for ``split`` ("train" or "eval"), passed to
        jitted samplers as arguments, not constants. Tasks that hold data (``lm_text``) give
        each split its own part; generative tasks give both splits the same operands."""
        _check_split(split)
        return ()

    @abc.abstractmethod
    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """Sample a batch; ``batch_size`` and ``length`` are static Python ints."""

    # -- public API ---------------------------------------------------------------------------
    def validate(self, length: int, split: str | None = "train") -> None:
        """Raise ValueError (naming the parameter) if the task cannot generate ``length`` from
        ``split`` (None: checks that hold for every split)."""
        if split is not None:
            _check_split(split)
        length = _check_size("length", length, check_positive=False)  # min_length() >= 1
        lo = self.min_length()
        if length < lo:
            why = self._min_length_explanation()
            raise ValueError(
                f"{self.name}: length={length} is too short, need length >= {lo}"
                + (f" ({why})" if why else "")
            )

    def sample(self, key: jax.Array, batch_size: int, length: int, split: str = "train") -> Batch:
        """Sample a :class:`Batch` of shape (batch_size, length) from ``split``; jit-able.

        ``batch_size`` and ``length`` must be static. Inside a jitted function this closes over
        :meth:`operands` (embedded as constants; large for ``lm_text``): pass them as jit
        arguments with :meth:`sample_from` instead, as :func:`sample_batch` does.
        """
        return self.sample_from(self.operands(split), key, batch_size, length)

    def sample_from(
        self, operands: Operands, key: jax.Array, batch_size: int, length: int
    ) -> Batch:
        """:meth:`sample` with ``operands`` (= ``self.operands(split)``) given, e.g. as jit
        args; the operands decide the split."""
        self.validate(length, split=None)
        batch_size = _check_size("batch_size", batch_size)
        return self._sample(key, batch_size, int(length), tuple(operands))


# --------------------------------------------------------------------------------------------
# passkey
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PasskeyTask(Task):
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

    needle_length: int = 4
    num_digits: int = 10
    depth: float | None = None
    name: ClassVar[str] = "passkey"

    KEY: ClassVar[int] = 0
    QUERY: ClassVar[int] = 1
    DIGIT_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        _check_int(self, "needle_length", 1)
        _check_int(self, "num_digits", 1)
        if self.depth is not None:
            _check_float(self, "depth", 0.0, 1.0)

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
        n, k = length + 1, self.needle_length
        bits = _random_bits(key, (batch_size, n + k + 1))
        seq = _randint(bits[:, :n], self.filler_start, self.vocab_size)
        needle = _randint(bits[:, n : n + k], self.DIGIT_START, self.filler_start)
        query_pos = n - k - 1  # = length - k
        max_start = query_pos - (k + 1)  # KEY block must end before QUERY
        if self.depth is None:
            start = _randint(bits[:, -1], 0, max_start + 1)
        else:
            start = jnp.full((batch_size,), round(self.depth * max_start), jnp.int32)
        idx = jnp.arange(n, dtype=jnp.int32)[None, :]
        offset = idx - start[:, None] - 1
        in_needle = (offset >= 0) & (offset < k)
        needle_tok = jnp.take_along_axis(needle, jnp.clip(offset, 0, k - 1), axis=1)
        seq = jnp.where(in_needle, needle_tok, seq)
        seq = jnp.where(idx == start[:, None], self.KEY, seq)
        seq = seq.at[:, query_pos].set(self.QUERY)
        seq = seq.at[:, query_pos + 1 :].set(needle)
        mask = jnp.arange(length) >= length - k
        return _finish(seq, mask[None, :])


# --------------------------------------------------------------------------------------------
# multi-query associative recall
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MQARTask(Task):
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

    num_pairs: int = 8
    pair_density: float = 0.0
    name: ClassVar[str] = "mqar"

    FILL: ClassVar[int] = 0
    SEP: ClassVar[int] = 1
    KEY_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        _check_int(self, "num_pairs", 1)
        _check_float(self, "pair_density", 0.0, 0.25)

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
        n, pairs = length + 1, self.pairs_for(length)
        region = n - 2 * pairs - 1
        slots = region // 2
        nk = self.num_keys
        bits = _random_bits(key, (batch_size, nk + pairs + slots))
        # distinct keys per row: the first `pairs` entries of a random permutation
        perm = jnp.argsort(bits[:, :nk], axis=1)
        keys = perm[:, :pairs].astype(jnp.int32) + self.KEY_START
        vals = _randint(bits[:, nk : nk + pairs], self.value_start, self.vocab_size)
        kv = jnp.stack([keys, vals], axis=-1).reshape(batch_size, 2 * pairs)
        # random permutation of slots; slot s holds pair rank[s] if rank[s] < pairs
        scores = bits[:, nk + pairs :]
        rank = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
        active = rank < pairs
        pair = jnp.clip(rank, 0, pairs - 1)
        q_key = jnp.where(active, jnp.take_along_axis(keys, pair, axis=1), self.FILL)
        q_val = jnp.where(active, jnp.take_along_axis(vals, pair, axis=1), self.FILL)
        queries = jnp.stack([q_key, q_val], axis=-1).reshape(batch_size, 2 * slots)
        tail = region - 2 * slots
        seq = jnp.concatenate(
            [
                kv,
                jnp.full((batch_size, 1), self.SEP, jnp.int32),
                queries,
                jnp.full((batch_size, tail), self.FILL, jnp.int32),
            ],
            axis=1,
        )
        q_mask = jnp.stack([active, jnp.zeros_like(active)], axis=-1).reshape(batch_size, -1)
        mask = jnp.concatenate(
            [
                jnp.zeros((batch_size, 2 * pairs + 1), bool),
                q_mask,
                jnp.zeros((batch_size, tail), bool),
            ],
            axis=1,
        )
        return _finish(seq, mask[:, :length])


# --------------------------------------------------------------------------------------------
# copy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyTask(Task):
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

    segment_fraction: float = 0.5
    segment_length: int | None = None
    name: ClassVar[str] = "copy"

    BEGIN: ClassVar[int] = 0
    SEP: ClassVar[int] = 1
    CONTENT_START: ClassVar[int] = 2

    def _check_params(self) -> None:
        _check_float(self, "segment_fraction", 0.0, 0.5, low_open=True)
        if self.segment_length is not None:
            _check_int(self, "segment_length", 1)

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
        n, m = length + 1, self.segment_length_for(length)
        seq = _randint(_random_bits(key, (batch_size, n)), self.CONTENT_START, self.vocab_size)
        begin = n - 2 * m - 2
        segment = seq[:, begin + 1 : begin + 1 + m]
        seq = seq.at[:, begin].set(self.BEGIN)
        seq = seq.at[:, begin + 1 + m].set(self.SEP)
        seq = seq.at[:, begin + 2 + m :].set(segment)
        mask = jnp.arange(length) >= length - m
        return _finish(seq, mask[None, :])


# --------------------------------------------------------------------------------------------
# flip-flop
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlipFlopTask(Task):
    """Flip-flop language modelling (Liu et al., 2023, "Exposing attention glitches").

    Vocabulary layout (ids >= 5 are unused)::

        0 w (write)   1 r (read)   2 i (ignore)   3 bit "0"   4 bit "1"

    Sequence of L+1 tokens: instruction/bit pairs ``x_1 b_1 x_2 b_2 ...`` (instructions at even
    positions, truncated to L+1 tokens). ``x_1 = w``; afterwards ``P(i) = p_ignore`` and
    ``P(w) = P(r) = (1 - p_ignore) / 2``. Bits after w and i are uniform; the bit after r equals
    the most recently written bit. Scored: exactly the positions holding r (target = read bit).
    ``min_length = 3``.
    """

    p_ignore: float = 0.8
    name: ClassVar[str] = "flipflop"

    W: ClassVar[int] = 0
    R: ClassVar[int] = 1
    I: ClassVar[int] = 2  # noqa: E741
    ZERO: ClassVar[int] = 3
    ONE: ClassVar[int] = 4

    def _check_params(self) -> None:
        _check_float(self, "p_ignore", 0.0, 1.0)

    def min_vocab_size(self) -> int:
        return 5

    def _vocab_explanation(self) -> str:
        return "w, r, i, 0, 1"

    def min_length(self) -> int:
        return 3

    def _min_length_explanation(self) -> str:
        return "the initial write and one more instruction with its bit"

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        n = length + 1
        num = (n + 1) // 2  # instructions at positions 0, 2, 4, ... <= n - 1
        p_write = (1.0 - self.p_ignore) / 2.0
        rnd = _random_bits(key, (batch_size, num, 2))
        u = _uniform(rnd[..., 0])
        instr = jnp.where(u < p_write, self.W, jnp.where(u < 2 * p_write, self.R, self.I))
        instr = instr.astype(jnp.int32).at[:, 0].set(self.W)
        bits = _randint(rnd[..., 1], 0, 2)
        steps = jnp.arange(num, dtype=jnp.int32)
        last_write = jax.lax.cummax(jnp.where(instr == self.W, steps, -1), axis=1)
        written = jnp.take_along_axis(bits, last_write, axis=1)
        bits = jnp.where(instr == self.R, written, bits)
        seq = jnp.stack([instr, bits + self.ZERO], axis=-1).reshape(batch_size, 2 * num)[:, :n]
        tokens = seq[:, :-1]
        return _finish(seq, tokens == self.R)


# --------------------------------------------------------------------------------------------
# synthetic language modelling
# --------------------------------------------------------------------------------------------

_SOURCE_CACHE: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}


@dataclass(frozen=True)
class SyntheticLMTask(Task):
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

    branching: int = 4
    copy_prob: float = 0.02
    span_length: int = 16
    min_lag: int = 32
    seed: int = 0
    name: ClassVar[str] = "lm_synthetic"

    def _check_params(self) -> None:
        _check_int(self, "branching", 1)
        _check_float(self, "copy_prob", 0.0, 1.0)
        _check_int(self, "span_length", 1)
        _check_int(self, "min_lag", 1)
        _check_int(self, "seed", 0)

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
        _check_split(split)
        successors, probs = self.transition_table()
        cdf = np.cumsum(probs, axis=1, dtype=np.float32)
        cdf[:, -1] = 1.0
        return (jnp.asarray(successors), jnp.asarray(cdf))

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        successors, cdf = operands
        n, last = length + 1, self.branching - 1
        rnd = _random_bits(key, (n, batch_size, 3))
        first = _randint(rnd[0, :, 0], 0, self.vocab_size)
        u = _uniform(rnd)
        u_markov, u_copy, u_lag = u[..., 0], u[..., 1], u[..., 2]
        buf = jnp.zeros((batch_size, n), jnp.int32).at[:, 0].set(first)
        zeros = jnp.zeros((batch_size,), jnp.int32)

        def step(carry, xs):
            buf, prev, remaining, lag = carry
            t, um, uc, ul = xs
            choice = jnp.minimum(jnp.sum(um[:, None] >= cdf[prev], axis=1), last)
            markov = jnp.take_along_axis(successors[prev], choice[:, None], axis=1)[:, 0]
            start = (t >= self.min_lag) & (remaining == 0) & (uc < self.copy_prob)
            span = (t - self.min_lag + 1).astype(jnp.float32)
            new_lag = self.min_lag + jnp.floor(ul * span).astype(jnp.int32)
            lag = jnp.where(start, jnp.clip(new_lag, self.min_lag, t), lag)
            copying = start | (remaining > 0)
            src = jnp.take_along_axis(buf, jnp.clip(t - lag, 0, n - 1)[:, None], axis=1)[:, 0]
            tok = jnp.where(copying, src, markov).astype(jnp.int32)
            remaining = jnp.where(start, self.span_length - 1, jnp.maximum(remaining - 1, 0))
            buf = jax.lax.dynamic_update_slice(buf, tok[:, None], (jnp.int32(0), t))
            return (buf, tok, remaining.astype(jnp.int32), lag), None

        ts = jnp.arange(1, n, dtype=jnp.int32)
        (seq, _, _, _), _ = jax.lax.scan(
            step, (buf, first, zeros, zeros), (ts, u_markov[1:], u_copy[1:], u_lag[1:])
        )
        return _finish(seq, jnp.ones((1, length), bool))


# --------------------------------------------------------------------------------------------
# byte-level text
# --------------------------------------------------------------------------------------------

_TEXT_CACHE: dict[tuple[str, int, int], np.ndarray] = {}
_TEXT_DEVICE: dict[tuple[str, int, int, float, str], jax.Array] = {}


def _text_key(path: str) -> tuple[str, int, int]:
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        raise ValueError(f"lm_text: path={path!r} does not exist or is not a regular file")
    st = os.stat(real)
    return (real, st.st_mtime_ns, st.st_size)


def _load_text(path: str) -> np.ndarray:
    """Read a file once into a read-only uint8 array (cached by path, mtime and size)."""
    cache_key = _text_key(path)
    if cache_key not in _TEXT_CACHE:
        data = np.fromfile(cache_key[0], dtype=np.uint8)
        data.setflags(write=False)
        _TEXT_CACHE[cache_key] = data
    return _TEXT_CACHE[cache_key]


def text_split_bounds(size: int, eval_fraction: float) -> dict[str, tuple[int, int]]:
    """Byte ranges [start, stop) of the ``train`` and ``eval`` splits of a ``size``-byte file.

    The last ``round(eval_fraction * size)`` bytes are held out for evaluation and NTK probes;
    training samples only windows that lie entirely before them. ``eval_fraction = 0`` (opt-in)
    evaluates on the training text."""
    held_out = round(eval_fraction * size)
    if held_out == 0:
        return {"train": (0, size), "eval": (0, size)}
    return {"train": (0, size - held_out), "eval": (size - held_out, size)}


@dataclass(frozen=True)
class TextLMTask(Task):
    """Byte-level language modelling on a local text file (nothing is downloaded).

    Vocabulary: bytes 0..255 (vocab_size must be >= 256; larger ids are unused). The file at
    ``path`` is read once into a uint8 array (``self.data``, shared through a module-level cache;
    the task hashes and compares by ``vocab_size``, ``path`` and ``eval_fraction``). The last
    ``eval_fraction`` of the file (default 0.1, contiguous) is the ``eval`` split, used by
    evaluation and NTK probes; training windows never touch it (:func:`text_split_bounds`).
    Each row is a uniformly random window of L+1 consecutive bytes of its split; all positions
    are scored. ``min_length = 1``; each split must hold at least L+1 bytes (and the file less
    than 2**31).
    """

    path: str
    eval_fraction: float = 0.1
    data: np.ndarray = field(init=False, repr=False, compare=False)
    name: ClassVar[str] = "lm_text"

    def _check_params(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise ValueError(f"lm_text: path must be a file path, got path={self.path!r}")
        object.__setattr__(self, "path", os.fspath(self.path))
        _check_float(self, "eval_fraction", 0.0, 0.9)
        data = _load_text(self.path)
        if data.size >= 2**31:
            raise ValueError(f"lm_text: path={self.path!r} is too large ({data.size} bytes)")
        object.__setattr__(self, "data", data)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "path": self.path,
            "eval_fraction": self.eval_fraction,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {"eval_fraction": TextLMTask.__dataclass_fields__["eval_fraction"].default, **state}
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "data", _load_text(self.path))

    def min_vocab_size(self) -> int:
        return 256

    def _vocab_explanation(self) -> str:
        return "one token per byte value"

    def min_length(self) -> int:
        return 1

    def split_bounds(self) -> dict[str, tuple[int, int]]:
        """Byte ranges [start, stop) of the ``train`` and ``eval`` splits of ``self.data``."""
        return text_split_bounds(int(self.data.size), self.eval_fraction)

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        if split is not None:  # None: the sampler checks the size of the operands it gets
            start, stop = self.split_bounds()[split]
            if stop - start < int(length) + 1:
                raise ValueError(
                    f"lm_text: the {split} split of path={self.path!r} (eval_fraction="
                    f"{self.eval_fraction}) has {stop - start} bytes, too short for "
                    f"length={length} (need length + 1 = {int(length) + 1} bytes)"
                )

    def operands(self, split: str = "train") -> Operands:
        """The split's bytes as one device array, cached per file and split. Made with
        ``ensure_compile_time_eval``, so a first call inside a trace still caches a concrete
        array, never a tracer."""
        _check_split(split)
        key = (*_text_key(self.path), self.eval_fraction, split)
        if key not in _TEXT_DEVICE:
            start, stop = self.split_bounds()[split]
            with jax.ensure_compile_time_eval():
                _TEXT_DEVICE[key] = jax.device_put(self.data[start:stop])
        return (_TEXT_DEVICE[key],)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        (data,) = operands
        n = length + 1
        if data.shape[0] < n:
            raise ValueError(
                f"lm_text: {data.shape[0]} bytes of path={self.path!r} are too few for "
                f"length={length} (need {n})"
            )
        starts = _randint(_random_bits(key, (batch_size,)), 0, data.shape[0] - n + 1)
        idx = starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
        return _finish(data[idx], jnp.ones((1, length), bool))


# --------------------------------------------------------------------------------------------
# registry and sampling
# --------------------------------------------------------------------------------------------

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (PasskeyTask, MQARTask, CopyTask, FlipFlopTask, SyntheticLMTask, TextLMTask)
}


def make_task(name: str, vocab_size: int, **params: Any) -> Task:
    """Build the task registered as ``name``; raise ValueError for unknown names or parameters."""
    if name not in TASKS:
        close = difflib.get_close_matches(str(name), list(TASKS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(TASKS)}.{hint}")
    cls = TASKS[name]
    allowed = [f.name for f in dataclasses.fields(cls) if f.init and f.name != "vocab_size"]
    for param in params:
        if param not in allowed:
            close = difflib.get_close_matches(param, allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown parameter {param!r} for task {name!r}; valid parameters: "
                f"{', '.join(allowed) or '(none)'}.{hint}"
            )
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and f.name != "vocab_size"
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    missing = [p for p in required if p not in params]
    if missing:
        raise ValueError(f"task {name!r} needs parameter(s): {', '.join(missing)}")
    return cls(vocab_size, **params)


@partial(jax.jit, static_argnames=("task", "batch_size", "length"))
def _sample_jit(
    task: Task, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    return task.sample_from(operands, key, batch_size, length)


def sample_batch(
    task: Task, key: jax.Array, batch_size: int, length: int, split: str = "train"
) -> Batch:
    """Validate, then sample a (batch_size, length) :class:`Batch` of ``split`` under jit.

    ``task``, ``batch_size`` and ``length`` are static (one compilation per combination).
    """
    task.validate(length, split)
    batch_size = _check_size("batch_size", batch_size)
    return _sample_jit(task, key, batch_size, int(length), task.operands(split))

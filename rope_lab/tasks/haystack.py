"""Haystacks for the long-context tasks (``niah``, ``variable_tracking``): filler tokens (i.i.d.
noise or a window of real text) with items (needles, statements) inserted at chosen places.

Items are inserted "stars and bars": item t of n (in sequence order) goes after ``offset[t]``
filler tokens, with offsets sorted (0 <= offset[0] <= ... <= offset[n-1] <= F for F filler
tokens), so it starts at ``offset[t] + (lengths of the items before it)``. Every placement of
non-overlapping items is one such offset vector, and uniform offsets give a uniform depth.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.tasks.base import randint, random_bits
from rope_lab.tasks.corpora import builtin_text, is_builtin

NOISE = "noise"
_TEXT: dict[str, np.ndarray] = {}
_DEVICE: dict[str, jax.Array] = {}


def is_noise(haystack: str) -> bool:
    """Whether ``haystack`` asks for i.i.d. noise tokens (else it names a text)."""
    return haystack == NOISE


def haystack_text(haystack: str) -> np.ndarray:
    """The bytes (n,) uint8 of a text haystack: a built-in corpus (``builtin:python-docs``) or
    a file path, read once."""
    if is_builtin(haystack):
        return builtin_text(haystack)
    if haystack not in _TEXT:
        try:
            data = np.fromfile(haystack, dtype=np.uint8)
        except OSError as err:
            raise ValueError(
                f"haystack={haystack!r}: not 'noise' nor a readable text ({err})"
            ) from None
        data.setflags(write=False)
        _TEXT[haystack] = data
    return _TEXT[haystack]


def text_operand(haystack: str) -> jax.Array:
    """The text's bytes as one device array (n,) uint8, cached; concrete even inside a trace."""
    if haystack not in _DEVICE:
        with jax.ensure_compile_time_eval():
            _DEVICE[haystack] = jax.device_put(haystack_text(haystack))
    return _DEVICE[haystack]


def filler(
    key: jax.Array, batch_size: int, n: int, low: int, high: int, text: jax.Array | None
) -> jax.Array:
    """(B, n) int32 filler: i.i.d. uniform in [low, high) without ``text``, else a window of
    ``text`` (its bytes as token ids) at a uniform random start per row."""
    bits = random_bits(key, (batch_size, max(n, 1)))
    if text is None:
        return randint(bits[:, :n], low, high)
    starts = randint(bits[:, 0], 0, text.shape[0] - n + 1)
    idx = starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    return text[idx].astype(jnp.int32)


def random_offsets(bits: jax.Array, n_filler: int) -> jax.Array:
    """(B, n) sorted uniform item offsets in [0, n_filler] from uint32 ``bits`` (B, n)."""
    return jnp.sort(randint(bits, 0, n_filler + 1), axis=1)


def depth_offsets(
    bits: jax.Array,
    n_filler: int,
    start: int,
    item_length: int,
    block_length: int,
) -> tuple[jax.Array, jax.Array]:
    """Offsets (B, D + 1) and block index (B,) that put a block of ``block_length`` tokens at
    token ``start`` exactly, among D others of ``item_length`` each (``bits`` (B, D + 1)).

    j of the others go before the block (j uniform over the counts that fit: the block's own
    offset ``start - j * item_length`` must lie in [0, n_filler]), their offsets uniform in
    [0, start - j item_length], the rest uniform after it. Needs n_filler >= item_length when
    D > 0 (so some j fits) and start <= n_filler + D item_length."""
    n_other = bits.shape[1] - 1
    lo = max(0, -(-(start - n_filler) // item_length)) if n_other else 0
    hi = min(n_other, start // item_length) if n_other else 0
    if lo > hi or start < 0 or start > n_filler + n_other * item_length:
        raise ValueError(f"no placement puts a block at token {start} (filler {n_filler})")
    j = randint(bits[:, 0], lo, hi + 1)  # (B,) items before the block
    own = start - j * item_length  # the block's offset
    if n_other == 0:
        return own[:, None], j
    idx = jnp.arange(n_other, dtype=jnp.int32)[None, :]
    before = idx < j[:, None]
    u = bits[:, 1:]
    others = jnp.where(
        before,
        randint(u, 0, own[:, None] + 1),
        own[:, None] + randint(u, 0, n_filler - own[:, None] + 1),
    )
    others = jnp.sort(others, axis=1)  # those before the block sort first: all <= own <= rest
    t = jnp.arange(n_other + 1, dtype=jnp.int32)[None, :]
    shifted = jnp.take_along_axis(others, jnp.clip(t - (t > j[:, None]), 0, n_other - 1), axis=1)
    return jnp.where(t == j[:, None], own[:, None], shifted), j


def insert(
    fill: jax.Array, offsets: jax.Array, lengths: jax.Array, contents: jax.Array
) -> jax.Array:
    """The haystack (B, F + sum(lengths)) int32: ``fill`` (B, F) with item t (of n, in sequence
    order) inserted after ``offsets[:, t]`` filler tokens. ``lengths`` (B, n) are the items'
    lengths and ``contents`` (B, sum(lengths)) their tokens concatenated in the same order."""
    batch, n_fill = fill.shape
    total = n_fill + contents.shape[1]
    ends = jnp.cumsum(lengths, axis=1)  # (B, n) item tokens up to and including item t
    starts = offsets + ends - lengths  # (B, n) where item t starts
    p = jnp.arange(total, dtype=jnp.int32)[None, :]
    # c: the last item starting at or before p (-1: none)
    c = jnp.sum(starts[:, None, :] <= p[:, :, None], axis=2) - 1
    cc = jnp.clip(c, 0, lengths.shape[1] - 1)
    start_c = jnp.take_along_axis(starts, cc, axis=1)
    len_c = jnp.take_along_axis(lengths, cc, axis=1)
    end_c = jnp.take_along_axis(ends, cc, axis=1)
    inside = (c >= 0) & (p < start_c + len_c)
    item_tok = jnp.take_along_axis(
        contents, jnp.clip(end_c - len_c + p - start_c, 0, contents.shape[1] - 1), axis=1
    )
    fill_idx = p - jnp.where(c >= 0, end_c, 0)
    fill_tok = jnp.take_along_axis(fill, jnp.clip(fill_idx, 0, max(n_fill - 1, 0)), axis=1)
    if n_fill == 0:
        fill_tok = jnp.zeros_like(item_tok)
    del batch
    return jnp.where(inside, item_tok, fill_tok)


class MarkedLayout:
    """The vocabulary head shared by the haystack tasks: three markers at `base` (0 for a
    noise haystack, 256 for text, whose bytes come first), then the task's own ids from
    `first_id`. Mixed into a task dataclass with a `haystack` field."""

    haystack: str

    @property
    def base(self) -> int:
        """Id of the first marker (0 for noise, 256 for text)."""
        return 0 if is_noise(self.haystack) else 256

    @property
    def QUERY(self) -> int:
        """The marker before what is asked."""
        return self.base + 1

    @property
    def ANSWER(self) -> int:
        """The marker before the answer."""
        return self.base + 2

    @property
    def first_id(self) -> int:
        """The first id after the three markers."""
        return self.base + 3

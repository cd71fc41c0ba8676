"""Haystacks in JAX for the long-context samplers (``niah``, ``variable_tracking``): the text's
device copy, filler tokens (noise or a window of text), item offsets (uniform, or the asked
block at a set depth) and the items inserted "stars and bars" (`tasks/haystack.py` describes
the placement and holds the text and the markers' layout).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.haystack import haystack_text
from rope_lab.tasks.sampling import on_device
from rope_lab.tasks.sampling.draws import randint, random_bits


def text_operand(haystack: str) -> jax.Array:
    """The text's bytes as one device array (n,) uint8, cached; concrete even inside a trace."""
    return on_device(("haystack", haystack), lambda: haystack_text(haystack))


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

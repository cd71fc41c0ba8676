"""The word-list samplers' shared JAX (``cwe``, ``fwe``): a random order of the words, the k
most frequent words of each row (as ``Counter.most_common``) and the ``words QUERY answer``
layout (the vocabulary: `tasks/words.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch
from rope_lab.tasks.sampling.draws import finish
from rope_lab.tasks.words import QUERY, WORD_START


def word_orders(bits: jax.Array, word_vocab: int) -> jax.Array:
    """A random order of the word ids per row (B, word_vocab) from the first ``word_vocab``
    columns of ``bits`` (B, >= word_vocab): the rank or role each word takes in its sequence."""
    return jnp.argsort(bits[:, :word_vocab], axis=1).astype(jnp.int32) + WORD_START


def top_words(words: jax.Array, word_vocab: int, k: int) -> jax.Array:
    """The k most frequent words of each row of ``words`` (B, n) (ids in [WORD_START, +
    word_vocab)), most frequent first, ties by first appearance: Python's
    ``Counter(row).most_common(k)`` (B, k), then words absent from the row, lowest id first,
    where fewer than k occur (the sort is stable)."""
    batch, n = words.shape
    rows = jnp.arange(batch)[:, None]
    ids = words - WORD_START
    counts = jnp.zeros((batch, word_vocab), jnp.int32).at[rows, ids].add(1)
    pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[None, :], words.shape)
    first = jnp.full((batch, word_vocab), n, jnp.int32).at[rows, ids].min(pos)
    rank = counts * (n + 1) - first  # higher: more frequent, then earlier
    return jnp.argsort(-rank, axis=1, stable=True)[:, :k].astype(jnp.int32) + WORD_START


def finish_words(words: jax.Array, answer: jax.Array, length: int) -> Batch:
    """``words QUERY answer``: the last k positions scored (QUERY predicts the first)."""
    k = answer.shape[1]
    query = jnp.full((words.shape[0], 1), QUERY, jnp.int32)
    mask = jnp.arange(length) >= length - k
    return finish(jnp.concatenate([words, query, answer], axis=1), mask[None, :])

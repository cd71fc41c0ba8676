"""The common words extraction task's batches drawn in JAX (the task, its parameters and checks:
`tasks/cwe.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.cwe import CommonWordsTask
from rope_lab.tasks.sampling.draws import random_bits
from rope_lab.tasks.sampling.words import finish_words, top_words, word_orders


def sample(
    task: CommonWordsTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    k, n = task.num_common, length - task.num_common
    c, _ = task.counts(length)
    others = task.word_vocab - k
    bits = random_bits(key, (batch_size, task.word_vocab + n))
    perm = word_orders(bits, task.word_vocab)
    slot = jnp.arange(n, dtype=jnp.int32)[None, :]
    common_slot = slot < k * c
    pick = jnp.where(common_slot, slot // c, k + (slot - k * c) % others)
    unshuffled = jnp.take_along_axis(perm, jnp.broadcast_to(pick, (batch_size, n)), axis=1)
    shuffle = jnp.argsort(bits[:, task.word_vocab :], axis=1)
    words = jnp.take_along_axis(unshuffled, shuffle, axis=1)
    return finish_words(words, top_words(words, task.word_vocab, k), length)

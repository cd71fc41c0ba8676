"""The frequent words extraction task's batches drawn in JAX (the task, its parameters and checks:
`tasks/fwe.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.fwe import FrequentWordsTask
from rope_lab.tasks.sampling.draws import random_bits, uniform
from rope_lab.tasks.sampling.words import finish_words, top_words, word_orders


def sample(
    task: FrequentWordsTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    k, n = task.num_frequent, length - task.num_frequent
    bits = random_bits(key, (batch_size, task.word_vocab + n))
    perm = word_orders(bits, task.word_vocab)
    cdf = jnp.cumsum(jnp.asarray(task.probabilities(), jnp.float32))
    rank = jnp.sum(uniform(bits[:, task.word_vocab :])[:, :, None] >= cdf[None, None, :], 2)
    rank = jnp.minimum(rank, task.word_vocab - 1).astype(jnp.int32)
    words = jnp.take_along_axis(perm, rank, axis=1)
    return finish_words(words, top_words(words, task.word_vocab, k), length)

"""The copy / induction task's batches drawn in JAX (the task, its parameters and checks:
`tasks/copy.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.copy import CopyTask
from rope_lab.tasks.sampling.draws import finish, randint, random_bits


def sample(
    task: CopyTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    n, m = length + 1, task.segment_length_for(length)
    seq = randint(random_bits(key, (batch_size, n)), task.CONTENT_START, task.vocab_size)
    begin = n - 2 * m - 2
    segment = seq[:, begin + 1 : begin + 1 + m]
    seq = seq.at[:, begin].set(task.BEGIN)
    seq = seq.at[:, begin + 1 + m].set(task.SEP)
    seq = seq.at[:, begin + 2 + m :].set(segment)
    mask = jnp.arange(length) >= length - m
    return finish(seq, mask[None, :])

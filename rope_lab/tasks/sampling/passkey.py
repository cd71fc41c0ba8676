"""The passkey retrieval task's batches drawn in JAX (the task, its parameters and checks:
`tasks/passkey.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.passkey import PasskeyTask
from rope_lab.tasks.sampling.draws import finish, randint, random_bits


def sample(
    task: PasskeyTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    n, k = length + 1, task.needle_length
    bits = random_bits(key, (batch_size, n + k + 1))
    seq = randint(bits[:, :n], task.filler_start, task.vocab_size)
    needle = randint(bits[:, n : n + k], task.DIGIT_START, task.filler_start)
    query_pos = n - k - 1  # = length - k
    max_start = query_pos - (k + 1)  # KEY block must end before QUERY
    if task.depth is None:
        start = randint(bits[:, -1], 0, max_start + 1)
    else:
        start = jnp.full((batch_size,), round(task.depth * max_start), jnp.int32)
    idx = jnp.arange(n, dtype=jnp.int32)[None, :]
    offset = idx - start[:, None] - 1
    in_needle = (offset >= 0) & (offset < k)
    needle_tok = jnp.take_along_axis(needle, jnp.clip(offset, 0, k - 1), axis=1)
    seq = jnp.where(in_needle, needle_tok, seq)
    seq = jnp.where(idx == start[:, None], task.KEY, seq)
    seq = seq.at[:, query_pos].set(task.QUERY)
    seq = seq.at[:, query_pos + 1 :].set(needle)
    mask = jnp.arange(length) >= length - k
    return finish(seq, mask[None, :])

"""The multi-query associative recall task's batches drawn in JAX (the task, its parameters
and checks: `tasks/mqar.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.mqar import MQARTask
from rope_lab.tasks.sampling.draws import finish, randint, random_bits


def sample(
    task: MQARTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    n, pairs = length + 1, task.pairs_for(length)
    region = n - 2 * pairs - 1
    slots = region // 2
    nk = task.num_keys
    bits = random_bits(key, (batch_size, nk + pairs + slots))
    # distinct keys per row: the first `pairs` entries of a random permutation
    perm = jnp.argsort(bits[:, :nk], axis=1)
    keys = perm[:, :pairs].astype(jnp.int32) + task.KEY_START
    vals = randint(bits[:, nk : nk + pairs], task.value_start, task.vocab_size)
    kv = jnp.stack([keys, vals], axis=-1).reshape(batch_size, 2 * pairs)
    # random permutation of slots; slot s holds pair rank[s] if rank[s] < pairs
    scores = bits[:, nk + pairs :]
    rank = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
    active = rank < pairs
    pair = jnp.clip(rank, 0, pairs - 1)
    q_key = jnp.where(active, jnp.take_along_axis(keys, pair, axis=1), task.FILL)
    q_val = jnp.where(active, jnp.take_along_axis(vals, pair, axis=1), task.FILL)
    queries = jnp.stack([q_key, q_val], axis=-1).reshape(batch_size, 2 * slots)
    tail = region - 2 * slots
    seq = jnp.concatenate(
        [
            kv,
            jnp.full((batch_size, 1), task.SEP, jnp.int32),
            queries,
            jnp.full((batch_size, tail), task.FILL, jnp.int32),
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
    return finish(seq, mask[:, :length])

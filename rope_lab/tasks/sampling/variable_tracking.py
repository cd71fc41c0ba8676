"""The variable tracking task's batches drawn in JAX (the task, its parameters and checks:
`tasks/variable_tracking.py`)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.sampling import haystack as hs
from rope_lab.tasks.sampling.draws import finish, random_bits
from rope_lab.tasks.variable_tracking import VariableTrackingTask


def sample(
    task: VariableTrackingTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    c_all, k = task.num_chains, task.num_hops
    n_items = c_all * k
    n_fill = task.filler_length(length)
    k_fill, k_rest = jax.random.split(key)
    sizes = (task.var_vocab, task.value_vocab, n_items, n_items)
    bits = random_bits(k_rest, (batch_size, sum(sizes)))
    b_var, b_val, b_order, b_place = (
        bits[:, a:b] for a, b in itertools.pairwise((0, *itertools.accumulate(sizes)))
    )
    names = jnp.argsort(b_var, axis=1)[:, :n_items].astype(jnp.int32) + task.var_start
    names = names.reshape(batch_size, c_all, k)  # names[c, i]: chain c's i-th variable
    values = jnp.argsort(b_val, axis=1)[:, :c_all].astype(jnp.int32) + task.value_start
    # chains interleaved at random; a chain's i-th statement is its i-th appearance
    chain = jnp.argsort(b_order, axis=1).astype(jnp.int32) // k  # (B, C k)
    same = chain[:, :, None] == chain[:, None, :]
    earlier = jnp.tril(jnp.ones((n_items, n_items), bool), -1)
    hop = jnp.sum(same & earlier[None], axis=2).astype(jnp.int32)
    rows = jnp.arange(batch_size)[:, None]
    target = names[rows, chain, hop]
    source = jnp.where(
        hop == 0,
        jnp.take_along_axis(values, chain, axis=1),
        names[rows, chain, jnp.maximum(hop - 1, 0)],
    )
    marker = jnp.full_like(target, task.VAR)
    contents = jnp.stack([marker, target, source], axis=2).reshape(batch_size, 3 * n_items)
    offsets = hs.random_offsets(b_place, n_fill)
    lengths = jnp.full((batch_size, n_items), 3, jnp.int32)
    text = operands[0] if operands else None
    fill = hs.filler(k_fill, batch_size, n_fill, task.filler_start, task.vocab_size, text)
    hay = hs.insert(fill, offsets, lengths, contents)
    seq = jnp.concatenate(
        [
            hay,
            jnp.full((batch_size, 1), task.QUERY, jnp.int32),
            values[:, :1],
            jnp.full((batch_size, 1), task.ANSWER, jnp.int32),
            names[:, 0],
        ],
        axis=1,
    )
    mask = jnp.arange(length) >= length - k
    return finish(seq, mask[None, :])

"""The needle in a haystack task's batches drawn in JAX (the task, its parameters and checks:
`tasks/niah.py`)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.niah import NeedleTask
from rope_lab.tasks.sampling import haystack as hs
from rope_lab.tasks.sampling.draws import finish, randint, random_bits


def sample(
    task: NeedleTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    k_all, v_all, q_all = task.num_keys, task.num_values, task.num_queries
    w, nl, d = task.value_length, task.needle_length, task.distractors
    n_target = q_all * v_all
    n_fill = task.filler_length(length)
    k_fill, k_rest = jax.random.split(key)
    sizes = (task.key_vocab, k_all * v_all * w, n_target, max(d, 1), d + 2)
    bits = random_bits(k_rest, (batch_size, sum(sizes)))
    cut = (0, *itertools.accumulate(sizes))
    b_keys, b_vals, b_block, b_dist, b_place = (bits[:, a:b] for a, b in itertools.pairwise(cut))
    keys = jnp.argsort(b_keys, axis=1)[:, :k_all].astype(jnp.int32) + task.key_start
    vals = randint(b_vals, task.value_start, task.filler_start).reshape(batch_size, k_all, v_all, w)
    marker = jnp.full((batch_size, 1), task.NEEDLE, jnp.int32)

    def needles(key_idx: jax.Array, val_idx: jax.Array) -> jax.Array:
        """(B, n, nl) needles of keys[key_idx] with values[key_idx, val_idx]."""
        k = jnp.take_along_axis(keys, key_idx, axis=1)
        v = vals[jnp.arange(batch_size)[:, None], key_idx, val_idx]  # (B, n, w)
        mk = jnp.broadcast_to(marker[:, :, None], (batch_size, key_idx.shape[1], 1))
        return jnp.concatenate([mk, k[:, :, None], v], axis=2)

    # the asked needles in random order; a key's r-th needle holds its r-th value
    owner = jnp.argsort(b_block, axis=1).astype(jnp.int32) // v_all  # (B, Q V)
    same = owner[:, :, None] == owner[:, None, :]
    earlier = jnp.tril(jnp.ones((n_target, n_target), bool), -1)
    rank = jnp.sum(same & earlier[None], axis=2).astype(jnp.int32)
    block = needles(owner, rank).reshape(batch_size, n_target * nl)
    # distractors: the other keys' needles in random order, one item each
    dist_id = jnp.argsort(b_dist, axis=1)[:, :d].astype(jnp.int32)
    dist = needles(q_all + dist_id // v_all, dist_id % v_all).reshape(batch_size, d * nl)

    if task.depth is None:
        offsets = hs.random_offsets(b_place[:, : d + 1], n_fill)
        at = randint(b_place[:, d + 1], 0, d + 1)  # the block's rank among the items
    else:
        start = task.block_start(length, task.depth)
        offsets, at = hs.depth_offsets(b_place[:, : d + 1], n_fill, start, nl, task.block_length)
    t = jnp.arange(d + 1, dtype=jnp.int32)[None, :]
    lengths = jnp.where(t == at[:, None], task.block_length, nl)
    i = jnp.arange(task.block_length + d * nl, dtype=jnp.int32)[None, :]
    first = at[:, None] * nl
    in_block = (i >= first) & (i < first + task.block_length)
    from_dist = jnp.where(i < first, i, i - task.block_length)
    contents = jnp.where(
        in_block,
        jnp.take_along_axis(block, jnp.clip(i - first, 0, task.block_length - 1), axis=1),
        jnp.take_along_axis(dist, jnp.clip(from_dist, 0, max(d * nl - 1, 0)), axis=1) if d else 0,
    )
    text = operands[0] if operands else None
    fill = hs.filler(k_fill, batch_size, n_fill, task.filler_start, task.vocab_size, text)
    hay = hs.insert(fill, offsets, lengths, contents)
    answer = vals[:, :q_all].reshape(batch_size, task.answer_length)
    seq = jnp.concatenate(
        [
            hay,
            jnp.full((batch_size, 1), task.QUERY, jnp.int32),
            keys[:, :q_all],
            jnp.full((batch_size, 1), task.ANSWER, jnp.int32),
            answer,
        ],
        axis=1,
    )
    mask = jnp.arange(length) >= length - task.answer_length
    return finish(seq, mask[None, :])

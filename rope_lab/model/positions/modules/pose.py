"""PoSE, positional skip-wise training (Zhu et al. 2024, "PoSE: Efficient Context Window Extension
of LLMs via Positional Skip-wise Training", Section 3.2; reference code dwzhu-pku/PoSE,
src/train_pose.py).

A training sequence of L tokens is cut into N contiguous chunks of lengths l_0..l_{N-1}; chunk i
keeps contiguous position ids starting at st_i + u_i, where st_i = l_0 + ... + l_{i-1} and the
skipping biases are u_0 = 0, u_i ~ U{u_{i-1}, ..., L_t - L}. The model thus sees relative
distances up to L_t - 1 while attending over L tokens only. Orthogonal to the encoding and used
in training only (`train.pose_target_length`, `train.pose_chunks`); evaluation and fine-tuning
at a target length keep positions 0..L-1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int, PRNGKeyArray

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig


def chunk_starts(length: int, chunks: int, *, key: PRNGKeyArray) -> Int[Array, " N"]:
    """Start offsets st_0 = 0 < st_1 < ... < st_{N-1} < L of `chunks` non-empty chunks.

    The N - 1 cuts are a uniform draw without replacement from {1, ..., L-1}, so every split of
    L into N positive chunk lengths is equally likely (the paper leaves this distribution open;
    for N = 2 the reference code draws l_0 from {1, ..., ceil(L/2)} only).
    """
    cuts = jax.random.choice(key, jnp.arange(1, length), (chunks - 1,), replace=False)
    return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.sort(cuts).astype(jnp.int32)])


def skip_biases(chunks: int, max_skip: int, *, key: PRNGKeyArray) -> Int[Array, " N"]:
    """Skipping biases u (N,): u_0 = 0, then u_i ~ U{u_{i-1}, ..., max_skip}, non-decreasing."""

    def draw(previous, k):
        u = jax.random.randint(k, (), previous, max_skip + 1, dtype=jnp.int32)
        return u, u

    _, rest = jax.lax.scan(draw, jnp.int32(0), jax.random.split(key, chunks - 1))
    return jnp.concatenate([jnp.zeros(1, jnp.int32), rest])


def pose_positions(
    length: int, target_length: int, chunks: int, *, key: PRNGKeyArray
) -> Int[Array, " L"]:
    """PoSE position ids (L,) of one sequence of `length` tokens for a `target_length` window.

    Strictly increasing, contiguous inside each of the `chunks` chunks, first id 0, all in
    [0, target_length). Exactly 0..L-1 when chunks == 1 or target_length == length.
    """
    if not 1 <= chunks <= length:
        raise ValueError(f"chunks: must be in [1, length={length}], got {chunks}")
    if target_length < length:
        raise ValueError(f"target_length: must be >= length={length}, got {target_length}")
    ids = jnp.arange(length, dtype=jnp.int32)
    if chunks == 1 or target_length == length:
        return ids
    length_key, skip_key = jax.random.split(key)
    starts = chunk_starts(length, chunks, key=length_key)
    chunk_of = jnp.searchsorted(starts, ids, side="right") - 1
    return ids + skip_biases(chunks, target_length - length, key=skip_key)[chunk_of]


def pose_batch_positions(
    cfg: TrialConfig, batch_size: int, length: int, *, key: PRNGKeyArray
) -> Int[Array, "B L"]:
    """PoSE positions (B, L) for a training batch: one independent draw per sequence, with
    `train.pose_target_length` and `train.pose_chunks` (at most `length` chunks)."""
    target = cfg.train.pose_target_length
    if target is None:
        raise ValueError("train.pose_target_length: PoSE positions need a target length")
    chunks = min(cfg.train.pose_chunks, length)
    keys = jax.random.split(key, batch_size)
    return jax.vmap(lambda k: pose_positions(length, target, chunks, key=k))(keys)

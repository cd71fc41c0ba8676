"""The JAX draws every task sampler shares: all randomness of a batch from one threefry call
(`random_bits`), integers and floats from its bits, and `finish` (a sequence split into a
`Batch`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch


def random_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """All randomness of one batch from a single 1-D threefry call, reshaped to ``shape``.

    One flat call compiles several times faster on CPU than several or multi-dimensional calls.
    """
    return jax.random.bits(key, (math.prod(shape),), jnp.uint32).reshape(shape)


def randint(bits: jax.Array, low: int, high: int | jax.Array) -> jax.Array:
    """Integers in [low, high) from uint32 ``bits`` (modulo bias <= (high - low) / 2**32)."""
    span = jnp.asarray(high - low).astype(jnp.uint32)
    return (bits % span).astype(jnp.int32) + low


def uniform(bits: jax.Array) -> jax.Array:
    """Floats in [0, 1) with 24 random bits from uint32 ``bits``."""
    return (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def finish(seq: jax.Array, mask: jax.Array) -> Batch:
    """Split a (B, L+1) sequence into tokens/targets; ``mask`` is (B, L) or broadcastable."""
    seq = seq.astype(jnp.int32)
    tokens, targets = seq[:, :-1], seq[:, 1:]
    return Batch(tokens, targets, jnp.broadcast_to(mask, tokens.shape).astype(bool))

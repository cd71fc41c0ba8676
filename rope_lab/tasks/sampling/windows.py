"""Random windows of a device token array drawn in JAX (``lm_text``, ``lm_tokens``); the host
windows and the evaluation protocols are `tasks/windows.py`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch
from rope_lab.tasks.sampling.draws import finish, randint, random_bits


def sample_windows(key: jax.Array, data: jax.Array, batch_size: int, length: int) -> Batch:
    """B windows of ``data`` (n,) at uniform random starts drawn from ``key``: a (B, L)
    :class:`Batch`, every position scored. Needs n >= L + 1 (checked by the caller)."""
    n = length + 1
    starts = randint(random_bits(key, (batch_size,)), 0, data.shape[0] - n + 1)
    idx = starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    return finish(data[idx], jnp.ones((1, length), bool))

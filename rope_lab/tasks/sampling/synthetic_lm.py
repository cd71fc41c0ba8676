"""The synthetic LM task's batches drawn in JAX (the task, its parameters and checks:
`tasks/synthetic_lm.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.sampling.draws import finish, randint, random_bits, uniform
from rope_lab.tasks.synthetic_lm import SyntheticLMTask


def sample(
    task: SyntheticLMTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    successors, cdf = operands
    n, last = length + 1, task.branching - 1
    rnd = random_bits(key, (n, batch_size, 3))
    first = randint(rnd[0, :, 0], 0, task.vocab_size)
    u = uniform(rnd)
    u_markov, u_copy, u_lag = u[..., 0], u[..., 1], u[..., 2]
    buf = jnp.zeros((batch_size, n), jnp.int32).at[:, 0].set(first)
    zeros = jnp.zeros((batch_size,), jnp.int32)

    def step(carry, xs):
        buf, prev, remaining, lag = carry
        t, um, uc, ul = xs
        choice = jnp.minimum(jnp.sum(um[:, None] >= cdf[prev], axis=1), last)
        markov = jnp.take_along_axis(successors[prev], choice[:, None], axis=1)[:, 0]
        start = (t >= task.min_lag) & (remaining == 0) & (uc < task.copy_prob)
        span = (t - task.min_lag + 1).astype(jnp.float32)
        new_lag = task.min_lag + jnp.floor(ul * span).astype(jnp.int32)
        lag = jnp.where(start, jnp.clip(new_lag, task.min_lag, t), lag)
        copying = start | (remaining > 0)
        src = jnp.take_along_axis(buf, jnp.clip(t - lag, 0, n - 1)[:, None], axis=1)[:, 0]
        tok = jnp.where(copying, src, markov).astype(jnp.int32)
        remaining = jnp.where(start, task.span_length - 1, jnp.maximum(remaining - 1, 0))
        buf = jax.lax.dynamic_update_slice(buf, tok[:, None], (jnp.int32(0), t))
        return (buf, tok, remaining.astype(jnp.int32), lag), None

    ts = jnp.arange(1, n, dtype=jnp.int32)
    (seq, _, _, _), _ = jax.lax.scan(
        step, (buf, first, zeros, zeros), (ts, u_markov[1:], u_copy[1:], u_lag[1:])
    )
    return finish(seq, jnp.ones((1, length), bool))


def operands(task: SyntheticLMTask) -> Operands:
    """The Markov source on the device: successors (V, branching) int32 and their cumulative
    probabilities (V, branching) float32, the last column exactly 1."""
    successors, probs = task.transition_table()
    cdf = np.cumsum(probs, axis=1, dtype=np.float32)
    cdf[:, -1] = 1.0
    return (jnp.asarray(successors), jnp.asarray(cdf))

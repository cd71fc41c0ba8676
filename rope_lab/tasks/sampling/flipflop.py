"""The flip-flop task's batches drawn in JAX (the task, its parameters and checks:
`tasks/flipflop.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.flipflop import FlipFlopTask
from rope_lab.tasks.sampling.draws import finish, randint, random_bits, uniform


def sample(
    task: FlipFlopTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    n = length + 1
    num = (n + 1) // 2  # instructions at positions 0, 2, 4, ... <= n - 1
    p_write = (1.0 - task.p_ignore) / 2.0
    rnd = random_bits(key, (batch_size, num, 2))
    u = uniform(rnd[..., 0])
    instr = jnp.where(u < p_write, task.W, jnp.where(u < 2 * p_write, task.R, task.I))
    instr = instr.astype(jnp.int32).at[:, 0].set(task.W)
    bits = randint(rnd[..., 1], 0, 2)
    steps = jnp.arange(num, dtype=jnp.int32)
    last_write = jax.lax.cummax(jnp.where(instr == task.W, steps, -1), axis=1)
    written = jnp.take_along_axis(bits, last_write, axis=1)
    bits = jnp.where(instr == task.R, written, bits)
    seq = jnp.stack([instr, bits + task.ZERO], axis=-1).reshape(batch_size, 2 * num)[:, :n]
    tokens = seq[:, :-1]
    return finish(seq, tokens == task.R)

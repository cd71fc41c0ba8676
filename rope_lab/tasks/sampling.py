"""Sampling under jit, with a task's fixed arrays passed as operands instead of constants."""

from __future__ import annotations

from functools import partial

import jax

from rope_lab.tasks.base import Batch, Operands, Task, check_size


@partial(jax.jit, static_argnames=("task", "batch_size", "length"))
def _sample_jit(
    task: Task, batch_size: int, length: int, operands: Operands, *, key: jax.Array
) -> Batch:
    return task.sample_from(operands, batch_size, length, key=key)


def sample_batch(
    task: Task, batch_size: int, length: int, split: str = "train", *, key: jax.Array
) -> Batch:
    """Validate, then sample a (batch_size, length) :class:`Batch` of ``split`` under jit.

    ``task``, ``batch_size`` and ``length`` are static (one compilation per combination).
    """
    task.validate(length, split)
    batch_size = check_size("batch_size", batch_size)
    return _sample_jit(task, batch_size, int(length), task.operands(split), key=key)

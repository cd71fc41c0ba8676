"""The JAX side of the tasks: sampling under jit, with a task's fixed arrays passed as operands
instead of constants (`sample_batch`), and their cached device copies (`on_device`).

One module per task holds its sampler (`sample`, which the task's `_sample` imports when it
samples); `draws`, `haystack`, `words` and `windows` hold what several share. None of them is
imported by `rope_lab.tasks` itself, so the task registry imports no JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

import jax
import numpy as np

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


_DEVICE: dict[Hashable, jax.Array] = {}


def on_device(key: Hashable, host: Callable[[], np.ndarray]) -> jax.Array:
    """The device copy of the array ``host()`` makes, cached under ``key``. Made with
    ``ensure_compile_time_eval``, so a first call inside a trace still caches a concrete array,
    never a tracer."""
    if key not in _DEVICE:
        with jax.ensure_compile_time_eval():
            _DEVICE[key] = jax.device_put(host())
    return _DEVICE[key]

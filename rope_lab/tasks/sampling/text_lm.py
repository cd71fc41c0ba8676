"""The byte-level text LM task's batches drawn in JAX (the task, its parameters and checks:
`tasks/text_lm.py`)."""

from __future__ import annotations

import jax

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.sampling.windows import sample_windows
from rope_lab.tasks.text_lm import TextLMTask


def sample(
    task: TextLMTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    (data,) = operands
    n = length + 1
    if data.shape[0] < n:
        raise ValueError(
            f"lm_text: {data.shape[0]} bytes of path={task.path!r} are too few for "
            f"length={length} (need {n})"
        )
    return sample_windows(key, data, batch_size, length)

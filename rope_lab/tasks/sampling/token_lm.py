"""The token-corpus LM task's batches drawn in JAX (the task, its parameters and checks:
`tasks/token_lm.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rope_lab.tasks.base import Batch, Operands
from rope_lab.tasks.sampling.draws import finish
from rope_lab.tasks.sampling.windows import sample_windows
from rope_lab.tasks.token_lm import TokenLMTask


def sample(
    task: TokenLMTask, key: jax.Array, batch_size: int, length: int, operands: Operands
) -> Batch:
    """A (batch_size, length) batch of ``task`` from ``operands`` (`Task._sample`)."""
    (data,) = operands
    if data.ndim == 2:  # windows gathered on the host (host_batch)
        if data.shape != (batch_size, length + 1):
            raise ValueError(
                f"lm_tokens: host windows of shape {data.shape}, expected "
                f"({batch_size}, {length + 1})"
            )
        return finish(data, jnp.ones((1, length), bool))
    if data.shape[0] < length + 1:
        raise ValueError(
            f"lm_tokens: {data.shape[0]} tokens of {task.path} are too few for "
            f"length={length} (need {length + 1})"
        )
    return sample_windows(key, data, batch_size, length)

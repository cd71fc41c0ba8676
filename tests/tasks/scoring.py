"""Scoring stand-in predictors on a task's batches through the evaluation's own sums
(`rope_lab.trial.evaluate._sums`): an oracle that solves each sequence from its tokens, a
random guesser over the answer alphabet, and a uniform distribution over it."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.tasks import Task
from rope_lab.tasks.sampling import sample_batch
from rope_lab.trial.evaluate import _sums


def scores(task: Task, length: int, logits_of: Callable, *, batch: int = 128, seed: int = 0):
    """(accuracy, exact match, mean loss) over the scored tokens of one batch of ``task`` at
    ``length``, where ``logits_of(tokens, targets, mask)`` (numpy) gives logits (B, L, V)."""
    b = sample_batch(task, batch, length, split="eval", key=jax.random.key(seed))
    logits = jnp.asarray(logits_of(*(np.asarray(x) for x in b)), jnp.float32)
    (loss, correct, count), exact, n_seq = _sums(lambda tokens, positions: logits, b, None)
    count = float(np.sum(count))
    return (
        float(np.sum(correct)) / count,
        float(exact) / float(n_seq),
        float(np.sum(loss)) / count,
    )


def oracle(task: Task, solve: Callable) -> Callable:
    """Logits putting all mass on ``solve(task, tokens_row)``: the answer (m,) of a sequence
    read from its tokens alone, at its last m positions (no target is looked at)."""

    def logits_of(tokens, targets, mask):
        out = np.zeros((*tokens.shape, task.vocab_size), np.float32)
        for i, row in enumerate(tokens):
            answer = np.asarray(solve(task, row))
            m = answer.size
            out[i, np.arange(len(row) - m, len(row)), answer] = 30.0
        return out

    return logits_of


def guesser(task: Task, alphabet: np.ndarray, *, seed: int = 0, uniform: bool = False) -> Callable:
    """Logits over ``alphabet`` only (every other id -inf): i.i.d. Gaussian, so the argmax is a
    uniform guess independent of the answer; or (``uniform``) all equal, the uniform
    distribution (loss log |alphabet| exactly)."""

    def logits_of(tokens, targets, mask):
        rng = np.random.default_rng(seed)
        out = np.full((*tokens.shape, task.vocab_size), -1e9, np.float32)
        shape = (*tokens.shape, len(alphabet))
        out[..., alphabet] = 0.0 if uniform else rng.normal(size=shape)
        return out

    return logits_of

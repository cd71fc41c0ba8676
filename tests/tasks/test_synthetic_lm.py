"""Tests for rope_lab.tasks.synthetic_lm."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rope_lab.tasks import (
    SyntheticLMTask,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {
    "branching": (int, 4),
    "copy_prob": (float, 0.02),
    "span_length": (int, 16),
    "min_lag": (int, 32),
    "seed": (int, 0),
}


def example(text_path: str) -> SyntheticLMTask:
    """The synthetic LM the shared tests sample and check with `check_lm_synthetic`."""
    return make_task("lm_synthetic", 50, min_lag=8, copy_prob=0.1)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256."""
    return {"span_length": 2, "min_lag": 4}


def check_lm_synthetic(task: SyntheticLMTask, tokens, targets, mask) -> None:
    """Every token is a Markov successor of its predecessor or a copy from lag >= min_lag."""
    successors, _ = task.transition_table()
    assert mask.all()
    for row_tok, row_tgt in zip(tokens, targets, strict=True):
        seq = np.append(row_tok, row_tgt[-1])
        for t in range(1, len(seq)):
            markov_ok = seq[t] in successors[seq[t - 1]]
            copy_ok = t >= task.min_lag and seq[t] in seq[: t - task.min_lag + 1]
            assert markov_ok or copy_ok, t


def test_lm_synthetic_source_is_fixed_and_copies_happen() -> None:
    task = make_task("lm_synthetic", 30, branching=3, copy_prob=0.0)
    succ_a, probs_a = task.transition_table()
    assert succ_a.shape == (30, 3) and probs_a.shape == (30, 3)
    np.testing.assert_allclose(probs_a.sum(axis=1), 1.0, rtol=1e-5)
    same = make_task("lm_synthetic", 30, branching=3, copy_prob=0.5)
    np.testing.assert_array_equal(same.transition_table()[0], succ_a)  # seed fixes the source
    other = make_task("lm_synthetic", 30, branching=3, seed=1)
    assert not np.array_equal(other.transition_table()[0], succ_a)
    # pure Markov chain: every transition is a listed successor
    tokens, targets, _ = as_numpy(sample_batch(task, BATCH, 257, key=jax.random.key(0)))
    seq = np.concatenate([tokens, targets[:, -1:]], axis=1)
    assert all(seq[b, t] in succ_a[seq[b, t - 1]] for b in range(BATCH) for t in range(1, 258))
    # always copying after min_lag: every later token repeats one at least min_lag back
    copier = make_task("lm_synthetic", 30, copy_prob=1.0, span_length=5, min_lag=10)
    tokens, targets, mask = as_numpy(sample_batch(copier, BATCH, 257, key=jax.random.key(0)))
    check_lm_synthetic(copier, tokens, targets, mask)
    seq = np.concatenate([tokens, targets[:, -1:]], axis=1)
    lags_seen = set()
    for row in seq:  # spans of 5 start at t = 10, 15, ...; each repeats a block >= 10 back
        for t0 in range(10, 258, 5):
            span = row[t0 : t0 + 5]
            lags = [
                lag
                for lag in range(10, t0 + 1)
                if np.array_equal(row[t0 - lag : t0 - lag + len(span)], span)
            ]
            assert lags, t0
            lags_seen.update(lags)
    assert max(lags_seen) > 100  # the lag range widens with position

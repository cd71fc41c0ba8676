"""Shared constants and helpers of the task tests."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from rope_lab.tasks import Batch, Task, make_task

LENGTHS = [16, 64, 257]
BATCH = 8

# Hypothesis: every new length costs one XLA compilation, so the fast suite draws few examples;
# the `slow` variants draw many more.
FAST = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LENGTH = st.integers(3, 300)
SEED = st.integers(0, 2**31 - 1)


def as_numpy(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, targets, mask) of a batch as numpy arrays."""
    return np.asarray(batch.tokens), np.asarray(batch.targets), np.asarray(batch.mask)


def all_tasks(text_path: str) -> list[Task]:
    """One example of every registered task (the generic tests run each of them)."""
    return [
        make_task("passkey", 32),
        make_task("mqar", 40, num_pairs=4),
        make_task("copy", 20),
        make_task("flipflop", 8),
        make_task("lm_synthetic", 50, min_lag=8, copy_prob=0.1),
        make_task("lm_text", 256, path=text_path),
    ]

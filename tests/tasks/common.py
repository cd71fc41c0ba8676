"""Shared constants and helpers of the task tests."""

from __future__ import annotations

import importlib
import types

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from rope_lab import registry
from rope_lab.tasks import Batch, Task

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


def task_module(name: str) -> types.ModuleType:
    """The test module of registered task `name`: tests/tasks/test_<m>.py for the task's module
    rope_lab/tasks/<m>.py. The shared task tests read from it (docs/testing.md): `PARAMS`
    (parameter -> (type, default)), `example(text_path)` (the task they sample),
    `tiny_params(text_path)` (parameters for 8-token trials at vocabulary 256, short answers),
    `check_<name>(task, tokens, targets, mask)` (answers re-derived from the tokens) and,
    optionally, `EVERY_ROW_SCORED = False` (a sequence may have no scored target)."""
    path = f"tests.tasks.test_{registry.TASKS[name].__module__.rpartition('.')[2]}"
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as err:
        if err.name != path:
            raise
        raise AssertionError(f"task {name!r} has no test module {path}") from err


def all_tasks(text_path: str) -> list[Task]:
    """One example of every registered task (the generic tests run each of them)."""
    return [task_module(name).example(text_path) for name in registry.TASKS]

"""Tests for rope_lab.tasks.passkey."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rope_lab.tasks import (
    PasskeyTask,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"needle_length": (int, 4), "num_digits": (int, 10), "depth": (float | None, None)}


def example(text_path: str) -> PasskeyTask:
    """The passkey task the shared tests sample and check with `check_passkey`."""
    return make_task("passkey", 32)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256, with a short answer."""
    return {"needle_length": 2}


def check_passkey(task: PasskeyTask, tokens, targets, mask) -> None:
    k, length = task.needle_length, tokens.shape[1]
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        (key_pos,) = np.flatnonzero(row_tok == task.KEY)
        (query_pos,) = np.flatnonzero(row_tok == task.QUERY)
        needle = row_tok[key_pos + 1 : key_pos + 1 + k]
        assert len(needle) == k
        assert np.all((needle >= task.DIGIT_START) & (needle < task.filler_start))
        assert query_pos == length - k
        np.testing.assert_array_equal(row_mask, np.arange(length) >= query_pos)
        np.testing.assert_array_equal(row_tgt[row_mask], needle)
        np.testing.assert_array_equal(row_tok[query_pos + 1 :], needle[:-1])
        other = np.ones(length, bool)
        other[key_pos : key_pos + 1 + k] = False
        other[query_pos:] = False
        assert np.all(row_tok[other] >= task.filler_start)


def test_legacy_uint32_keys(tasks: dict) -> None:
    task = tasks["passkey"]
    tokens, targets, mask = as_numpy(sample_batch(task, BATCH, 16, key=jax.random.PRNGKey(3)))
    check_passkey(task, tokens, targets, mask)


def test_passkey_depth(tasks: dict) -> None:
    # depth=1.0: the KEY block ends right before QUERY
    task = make_task("passkey", 20, needle_length=3, num_digits=5, depth=1.0)
    tokens, targets, mask = as_numpy(sample_batch(task, BATCH, 64, key=jax.random.key(0)))
    assert np.all(tokens[:, 64 - 3 - 4] == task.KEY)
    check_passkey(task, tokens, targets, mask)
    # default: uniformly random depth, the needle moves around
    task = tasks["passkey"]
    positions = [
        np.argmax(np.asarray(sample_batch(task, BATCH, 257, key=jax.random.key(s)).tokens) == 0, 1)
        for s in range(8)
    ]
    assert len(set(np.concatenate(positions).tolist())) > 30

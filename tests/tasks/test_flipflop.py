"""Tests for rope_lab.tasks.flipflop."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import (
    FlipFlopTask,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, FAST, LENGTH, SEED, SLOW, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"p_ignore": (float, 0.8)}
EVERY_ROW_SCORED = False  # a row may hold no read instruction


def example(text_path: str) -> FlipFlopTask:
    """The flip-flop task the shared tests sample and check with `check_flipflop`."""
    return make_task("flipflop", 8)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256."""
    return {}


def check_flipflop(task: FlipFlopTask, tokens, targets, mask) -> None:
    instructions = (task.W, task.R, task.I)
    bits = (task.ZERO, task.ONE)
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        seq = np.append(row_tok, row_tgt[-1])
        assert seq[0] == task.W
        last_written = None
        expected_mask = np.zeros(len(row_tok), bool)
        for t, tok in enumerate(seq):
            if t % 2 == 0:
                assert tok in instructions
                continue
            assert tok in bits
            instr = seq[t - 1]
            if instr == task.W:
                last_written = tok
            elif instr == task.R:
                assert tok == last_written
                expected_mask[t - 1] = True
        np.testing.assert_array_equal(row_mask, expected_mask)
        np.testing.assert_array_equal(row_mask, row_tok == task.R)


def test_flipflop_instruction_frequencies(tasks: dict) -> None:
    task = tasks["flipflop"]  # p_ignore = 0.8
    instr = np.concatenate(
        [
            np.asarray(sample_batch(task, BATCH, 257, key=jax.random.key(s)).tokens)[:, 2::2]
            for s in range(8)
        ]
    )  # the initial write is forced, skip it
    freq = [np.mean(instr == v) for v in (task.W, task.R, task.I)]
    np.testing.assert_allclose(freq, [0.1, 0.1, 0.8], atol=0.02)
    dense = make_task("flipflop", 5, p_ignore=0.0)
    tokens, targets, mask = as_numpy(sample_batch(dense, BATCH, 64, key=jax.random.key(0)))
    assert not np.any(tokens[:, 0::2] == task.I)
    check_flipflop(dense, tokens, targets, mask)


def _flipflop_law(length: int, seed: int, p_ignore: float) -> None:
    task = FlipFlopTask(5, p_ignore=p_ignore)
    tokens, targets, mask = as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed)))
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    check_flipflop(task, tokens, targets, mask)


@FAST
@given(length=LENGTH, seed=SEED)
def test_flipflop_law_property(length: int, seed: int) -> None:
    _flipflop_law(length, seed, 0.5)


@pytest.mark.slow
@SLOW
@given(length=LENGTH, seed=SEED, p_ignore=st.sampled_from([0.0, 0.5, 0.8, 0.98]))
def test_flipflop_law_property_extended(length: int, seed: int, p_ignore: float) -> None:
    _flipflop_law(length, seed, p_ignore)

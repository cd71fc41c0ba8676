"""Tests for rope_lab.tasks.copy."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import (
    CopyTask,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, FAST, LENGTH, LENGTHS, SEED, SLOW, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"segment_fraction": (float, 0.5), "segment_length": (int | None, None)}


def example(text_path: str) -> CopyTask:
    """The copy task the shared tests sample and check with `check_copy`."""
    return make_task("copy", 20)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256, with a short answer."""
    return {"segment_length": 3}


def check_copy(task: CopyTask, tokens, targets, mask) -> None:
    length = tokens.shape[1]
    m = task.segment_length_for(length)
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        (begin,) = np.flatnonzero(row_tok == task.BEGIN)
        (sep,) = np.flatnonzero(row_tok == task.SEP)
        segment = row_tok[begin + 1 : sep]
        assert len(segment) == m
        assert sep == length - m
        np.testing.assert_array_equal(row_mask, np.arange(length) >= sep)
        np.testing.assert_array_equal(row_tgt[row_mask], segment)
        np.testing.assert_array_equal(row_tok[sep + 1 :], segment[:-1])


def test_copy_segment_length(batches: dict) -> None:
    task = make_task("copy", 10)
    assert [task.segment_length_for(n) for n in (3, 16, 64, 257)] == [1, 7, 31, 128]
    for length in LENGTHS:  # default: segment scales with length
        assert np.all(batches["copy", length][2].sum(axis=1) == task.segment_length_for(length))
    fixed = make_task("copy", 10, segment_length=5)
    assert fixed.min_length() == 11
    tokens, targets, mask = as_numpy(sample_batch(fixed, BATCH, 100, key=jax.random.key(0)))
    check_copy(fixed, tokens, targets, mask)
    assert np.all(mask.sum(axis=1) == 5)


def _copy_law(length: int, seed: int, fraction: float) -> None:
    task = CopyTask(12, segment_fraction=fraction)
    tokens, targets, mask = as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed)))
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    check_copy(task, tokens, targets, mask)


@FAST
@given(length=LENGTH, seed=SEED)
def test_copy_law_property(length: int, seed: int) -> None:
    _copy_law(length, seed, 0.3)


@pytest.mark.slow
@SLOW
@given(length=LENGTH, seed=SEED, fraction=st.sampled_from([0.05, 0.25, 0.5]))
def test_copy_law_property_extended(length: int, seed: int, fraction: float) -> None:
    _copy_law(length, seed, fraction)

"""Tests for rope_lab.tasks.mqar."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

from rope_lab.tasks import (
    MQARTask,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"num_pairs": (int, 8), "pair_density": (float, 0.0)}


def example(text_path: str) -> MQARTask:
    """The MQAR task the shared tests sample and check with `check_mqar`."""
    return make_task("mqar", 40, num_pairs=4)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256."""
    return {"num_pairs": 2}


def check_mqar(task: MQARTask, tokens, targets, mask) -> None:
    length = tokens.shape[1]
    pairs = task.pairs_for(length)
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        keys, vals = row_tok[0 : 2 * pairs : 2], row_tok[1 : 2 * pairs : 2]
        assert len(set(keys.tolist())) == pairs
        assert np.all((keys >= task.KEY_START) & (keys < task.value_start))
        assert np.all((vals >= task.value_start) & (vals < task.vocab_size))
        assert row_tok[2 * pairs] == task.SEP
        lookup = dict(zip(keys.tolist(), vals.tolist(), strict=True))
        region = np.arange(length) > 2 * pairs
        is_key = (row_tok >= task.KEY_START) & (row_tok < task.value_start)
        expected_mask = region & is_key
        np.testing.assert_array_equal(row_mask, expected_mask)
        queried = row_tok[expected_mask]
        assert sorted(queried.tolist()) == sorted(keys.tolist())  # each key queried once
        np.testing.assert_array_equal(row_tgt[expected_mask], [lookup[q] for q in queried])
        # everything else in the query region is FILL or the value right after its key
        after_key = np.zeros(length, bool)
        after_key[1:] = expected_mask[:-1]
        assert np.all(row_tok[region & ~expected_mask & ~after_key] == task.FILL)


def test_mqar_pairs_scale_with_length() -> None:
    task = make_task("mqar", 200, num_pairs=4, pair_density=1 / 16)
    assert [task.pairs_for(n) for n in (16, 64, 257, 300)] == [4, 4, 16, 18]
    tokens, targets, mask = as_numpy(sample_batch(task, BATCH, 257, key=jax.random.key(0)))
    check_mqar(task, tokens, targets, mask)
    assert np.all(mask.sum(axis=1) == 16)
    with pytest.raises(ValueError, match="vocab_size=200 is too small for 125 pairs"):
        sample_batch(task, BATCH, 2000, key=jax.random.key(0))

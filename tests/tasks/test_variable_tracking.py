"""Tests for rope_lab.tasks.variable_tracking: the answer equals a brute-force Python
resolution of the assignments, an oracle scores 1 and a guess scores 1 / var_vocab."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import make_task
from rope_lab.tasks.sampling import sample_batch
from rope_lab.tasks.variable_tracking import VariableTrackingTask
from tests.tasks.common import FAST, as_numpy
from tests.tasks.scoring import guesser, oracle, scores

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {
    "num_hops": (int, 4),
    "num_chains": (int, 2),
    "var_vocab": (int, 16),
    "value_vocab": (int, 16),
    "haystack": (str, "noise"),
}


def example(text_path: str) -> VariableTrackingTask:
    """Two chains of two hops on noise (min_length 16)."""
    return make_task("variable_tracking", 40, num_hops=2, num_chains=2, value_vocab=4)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 24 or 256: one chain of one hop."""
    return {"num_hops": 1, "num_chains": 1, "var_vocab": 4, "value_vocab": 4}


def resolve(task: VariableTrackingTask, row: np.ndarray) -> list[int]:
    """The variables bound to the asked value, by executing the assignments in order:
    ``VAR x src`` binds x to src if src is a value, else to src's value."""
    (query,) = np.flatnonzero(row == task.QUERY)
    bound: dict[int, int] = {}
    order: list[int] = []
    for p in np.flatnonzero(row[:query] == task.VAR):
        name, src = int(row[p + 1]), int(row[p + 2])
        bound[name] = src if src >= task.value_start else bound[src]
        order.append(name)
    asked = int(row[query + 1])
    return [x for x in order if bound[x] == asked]


def check_variable_tracking(task: VariableTrackingTask, tokens, targets, mask) -> None:
    length, k = tokens.shape[1], task.num_hops
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        seq = np.concatenate([row_tok, row_tgt[-1:]])
        assert seq[length - k] == task.ANSWER and seq[length - k - 2] == task.QUERY
        np.testing.assert_array_equal(row_mask, np.arange(length) >= length - k)
        answer = resolve(task, seq)
        assert len(answer) == k  # every variable of the chain, none of the others
        np.testing.assert_array_equal(row_tgt[row_mask], answer)
        statements = np.flatnonzero(seq[: length - k - 2] == task.VAR)
        assert len(statements) == task.num_chains * k
        names = seq[statements + 1]
        assert len(set(names.tolist())) == names.size  # each variable assigned once
        other = np.ones(length - k - 2, bool)
        for p in statements:
            other[p : p + 3] = False
        hay = seq[: length - k - 2][other]
        assert np.all(hay >= task.filler_start) if task.base == 0 else np.all(hay < 256)


@FAST
@given(
    length=st.integers(16, 200),
    hops=st.integers(1, 5),
    chains=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_answer_is_the_brute_force_resolution(length, hops, chains, seed) -> None:
    task = make_task("variable_tracking", 60, num_hops=hops, num_chains=chains)
    length = max(length, task.min_length())
    tokens, targets, mask = as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed)))
    check_variable_tracking(task, tokens, targets, mask)


def test_statements_spread_over_the_haystack() -> None:
    """The first statement's position is spread over the haystack (uniform offsets)."""
    task = make_task("variable_tracking", 40, num_hops=1, num_chains=1)
    tokens = np.asarray(sample_batch(task, 256, 100, key=jax.random.key(0)).tokens)
    first = np.argmax(tokens == task.VAR, axis=1)
    f = task.filler_length(100)
    assert abs(first.mean() - f / 2) < 0.1 * f and first.min() < 5 and first.max() > f - 5


def test_text_haystack() -> None:
    task = make_task("variable_tracking", 300, haystack="builtin:python-docs", num_hops=3)
    tokens, targets, mask = as_numpy(sample_batch(task, 4, 120, key=jax.random.key(0)))
    check_variable_tracking(task, tokens, targets, mask)


def test_oracle_scores_one_and_guessers_score_chance() -> None:
    """The brute-force resolution from the tokens: accuracy and exact match 1. A uniform guess
    among the 16 names: accuracy 1/16 (4 s.e. over 128 x 4 tokens), exact match ~ 0; the
    uniform distribution over them: loss ln 16."""
    task = make_task("variable_tracking", 40)
    acc, exact, _ = scores(task, 60, oracle(task, resolve))
    assert (acc, exact) == (1.0, 1.0)
    names = np.arange(task.var_start, task.value_start)
    acc, exact, _ = scores(task, 60, guesser(task, names, seed=1))
    p, n = 1 / 16, 128 * 4
    assert abs(acc - p) < 4 * math.sqrt(p * (1 - p) / n) and exact == 0.0
    _, _, loss = scores(task, 60, guesser(task, names, uniform=True))
    assert loss == pytest.approx(math.log(16), rel=1e-6)


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"num_hops": 0}, "num_hops must be >= 1"),
        ({"num_hops": 9}, "var_vocab must be >= num_chains x num_hops = 18"),
        ({"value_vocab": 1}, "value_vocab must be >= num_chains=2"),
    ],
)
def test_invalid_parameters_are_named(params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_task("variable_tracking", 64, **params)

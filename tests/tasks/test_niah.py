"""Tests for rope_lab.tasks.niah: answers re-derived from the tokens, the depth law, the
variants' answer sets, an oracle scoring 1 and guessers scoring chance."""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import make_task
from rope_lab.tasks.niah import NeedleTask
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import FAST, as_numpy
from tests.tasks.scoring import guesser, oracle, scores

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {
    "num_keys": (int, 1),
    "num_values": (int, 1),
    "num_queries": (int, 1),
    "value_length": (int, 2),
    "key_vocab": (int, 16),
    "value_vocab": (int, 16),
    "haystack": (str, "noise"),
    "depth": (float | None, None),
}


def example(text_path: str) -> NeedleTask:
    """Multi-key (two distractors) on noise, short enough for length 16 (the shared tests'
    sample; the other variants are sampled below)."""
    return make_task("niah", 48, num_keys=3, value_length=1)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 24 or 256: a single needle of one token."""
    return {"value_length": 1, "key_vocab": 4, "value_vocab": 4}


def parse(task: NeedleTask, row: np.ndarray) -> dict:
    """Everything a sequence says, read by brute force: the needles (start, key, value) in
    order, the asked keys and the answer tokens."""
    w = task.value_length
    (query,) = np.flatnonzero(row == task.QUERY)
    (answer_at,) = np.flatnonzero(row == task.ANSWER)
    needles = [
        (int(p), int(row[p + 1]), tuple(row[p + 2 : p + 2 + w].tolist()))
        for p in np.flatnonzero(row[:query] == task.NEEDLE)
    ]
    asked = row[query + 1 : answer_at].tolist()
    return {"needles": needles, "asked": asked, "query": int(query), "answer_at": int(answer_at)}


def solve(task: NeedleTask, row: np.ndarray) -> list[int]:
    """The answer from the tokens alone: for each asked key, the values of its needles in the
    order they appear."""
    found = parse(task, row)
    return [t for k in found["asked"] for _, key, v in found["needles"] if key == k for t in v]


def check_niah(task: NeedleTask, tokens, targets, mask) -> None:
    length = tokens.shape[1]
    m, nl = task.answer_length, task.needle_length
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        seq = np.concatenate([row_tok, row_tgt[-1:]])
        found = parse(task, seq)
        needles = found["needles"]
        keys = [k for _, k, _ in needles]
        # K distinct keys, V needles each, Q of them asked (distinct)
        assert len(set(keys)) == task.num_keys
        assert all(keys.count(k) == task.num_values for k in set(keys))
        assert len(set(found["asked"])) == task.num_queries <= task.num_keys
        assert set(found["asked"]) <= set(keys)
        # needles do not overlap and hold keys / values from their ranges
        starts = [p for p, _, _ in needles]
        assert all(b - a >= nl for a, b in itertools.pairwise(starts))
        assert all(task.key_start <= k < task.value_start for k in keys)
        assert all(task.value_start <= t < task.filler_start for _, _, v in needles for t in v)
        # the answer is the end of the sequence, scored exactly there
        assert found["answer_at"] == length - m
        np.testing.assert_array_equal(row_mask, np.arange(length) >= length - m)
        np.testing.assert_array_equal(row_tgt[row_mask], solve(task, seq))
        # everything else is filler: noise ids above the values, or text bytes
        other = np.ones(length + 1, bool)
        for p in starts:
            other[p : p + nl] = False
        other[found["query"] :] = False
        hay = seq[other]
        if task.base == 0:
            assert np.all(hay >= task.filler_start)
        else:
            assert np.all(hay < 256)


def asked_block_start(task: NeedleTask, row: np.ndarray) -> int:
    """Where the asked keys' needles start (the first needle of an asked key)."""
    found = parse(task, row)
    return min(p for p, key, _ in found["needles"] if key in found["asked"])


@pytest.mark.parametrize("depth", [0.0, 0.3, 1.0])
def test_the_asked_needles_sit_at_the_requested_depth(depth: float) -> None:
    """The asked needles form one block starting at round(d (H - block)): token 0 at d = 0,
    right before QUERY at d = 1; distractors (4 keys of 2 needles) fill in around it."""
    task = make_task("niah", 48, num_keys=5, num_values=2, depth=depth)
    length = 120
    tokens, targets, mask = as_numpy(sample_batch(task, 16, length, key=jax.random.key(1)))
    h = length - 1 - 1 - 4  # QUERY, one key, ANSWER and m = 1 * 2 * 2 answer tokens
    assert task.haystack_length(length) == h - 1 + 1 and task.block_length == 8
    expected = round(depth * (h - 8))
    assert expected == {0.0: 0, 0.3: 32, 1.0: 106}[depth]
    check_niah(task, tokens, targets, mask)
    for row in tokens:
        start = asked_block_start(task, row)
        assert start == expected
        found = parse(task, row)
        block = [n for n in found["needles"] if n[1] in found["asked"]]
        assert [p for p, _, _ in block] == [start, start + 4]  # one block of 2 needles
    # the distractors move: not all rows put the same number before the block
    before = {sum(p < expected for p, _, _ in parse(task, r)["needles"]) for r in tokens}
    assert len(before) > 1 or depth in (0.0, 1.0)


@FAST
@given(
    length=st.integers(20, 160),
    depth=st.floats(0, 1),
    num_keys=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_depth_law_for_all_lengths(length: int, depth: float, num_keys: int, seed: int) -> None:
    task = make_task("niah", 40, num_keys=num_keys, depth=depth)
    length = max(length, task.min_length())
    tokens, targets, mask = as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed)))
    check_niah(task, tokens, targets, mask)
    for row in tokens:
        assert asked_block_start(task, row) == task.block_start(length, depth)


def test_random_depth_covers_the_haystack() -> None:
    task = make_task("niah", 40, num_keys=2)
    tokens = np.asarray(sample_batch(task, 256, 200, key=jax.random.key(0)).tokens)
    starts = np.array([asked_block_start(task, r) for r in tokens])
    h = task.haystack_length(200) - task.needle_length
    # uniform over 0..h: mean h / 2, both ends reached within a tenth
    assert abs(starts.mean() - h / 2) < 0.1 * h
    assert starts.min() < 0.1 * h and starts.max() > 0.9 * h


def test_multi_value_answer_is_exactly_the_bound_values() -> None:
    """Multi-value: the answer's values are the asked key's values, as a multiset, in the
    order they appear; multi-query: each asked key's in the order asked."""
    task = make_task("niah", 64, num_keys=3, num_values=3, num_queries=2, value_length=2)
    tokens, targets, mask = as_numpy(sample_batch(task, 16, 150, key=jax.random.key(2)))
    for row, tgt, msk in zip(tokens, targets, mask, strict=True):
        found = parse(task, np.concatenate([row, tgt[-1:]]))
        answer = tgt[msk].reshape(2, 3, 2)
        for q, key in enumerate(found["asked"]):
            bound = [v for _, k, v in found["needles"] if k == key]
            assert sorted(bound) == sorted(map(tuple, answer[q].tolist()))
            assert bound == list(map(tuple, answer[q].tolist()))


def test_text_haystack_reads_the_builtin_text() -> None:
    from rope_lab.tasks.corpora import builtin_text

    task = make_task("niah", 300, haystack="builtin:python-docs", num_keys=2, depth=0.5)
    assert (task.NEEDLE, task.min_vocab_size()) == (256, 256 + 3 + 32)
    tokens, targets, mask = as_numpy(sample_batch(task, 4, 200, key=jax.random.key(0)))
    check_niah(task, tokens, targets, mask)
    text = builtin_text("builtin:python-docs").tobytes()
    for row in tokens:
        hay = bytes(int(t) for t in row[: parse(task, row)["query"]] if t < 256)
        # the filler, needles taken out, is one window of the text
        assert len(hay) == task.filler_length(200) and hay in text
    with pytest.raises(ValueError, match="vocab_size=290 is too small"):
        make_task("niah", 290, haystack="builtin:python-docs")


def test_oracle_scores_one_and_guessers_score_chance() -> None:
    """An oracle reading the answer from the tokens: accuracy and exact match 1. A uniform
    guess among the 16 value tokens: accuracy 1/16 (4 s.e. band over 128 x 8 answer tokens),
    exact match 16^-8 ~ 0; the uniform distribution over them: loss ln 16 exactly."""
    task = make_task("niah", 48, num_keys=3, num_values=2, num_queries=2, value_length=2)
    acc, exact, _ = scores(task, 60, oracle(task, solve))
    assert (acc, exact) == (1.0, 1.0)
    alphabet = np.arange(task.value_start, task.filler_start)
    acc, exact, _ = scores(task, 60, guesser(task, alphabet, seed=3))
    p, n = 1 / 16, 128 * task.answer_length
    assert abs(acc - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert exact == 0.0
    _, _, loss = scores(task, 60, guesser(task, alphabet, uniform=True))
    assert loss == pytest.approx(math.log(16), rel=1e-6)


def test_at_depth_is_the_task_with_its_depth_set() -> None:
    task = make_task("niah", 40, num_keys=2)
    assert task.at_depth(0.25) == make_task("niah", 40, num_keys=2, depth=0.25)
    assert make_task("passkey", 32).at_depth(1.0).depth == 1.0
    with pytest.raises(ValueError, match="mqar: has no depth"):
        make_task("mqar", 64).at_depth(0.5)


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"num_queries": 2}, "num_queries must be <= num_keys=1"),
        ({"num_keys": 20}, "key_vocab must be >= num_keys=20"),
        ({"depth": 1.5}, r"depth must be in \[0.0, 1.0\]"),
        ({"haystack": "/no/such/file"}, "not 'noise' nor a readable text"),
        ({"value_length": 0}, "value_length must be >= 1"),
    ],
)
def test_invalid_parameters_are_named(params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_task("niah", 64, **params)

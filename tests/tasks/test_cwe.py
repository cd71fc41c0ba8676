"""Tests for rope_lab.tasks.cwe (and the shared answer of rope_lab.tasks.words): the answer
equals Python's ``Counter.most_common``, the count law, an oracle scores 1 and a guess scores
1 / word_vocab."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import make_task
from rope_lab.tasks.cwe import CommonWordsTask
from rope_lab.tasks.sampling import sample_batch
from rope_lab.tasks.words import WORD_START
from tests.tasks.common import FAST, as_numpy
from tests.tasks.scoring import guesser, oracle, scores

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"num_common": (int, 3), "common_ratio": (float, 4.0), "word_vocab": (int, 32)}


def example(text_path: str) -> CommonWordsTask:
    """The task the shared tests sample (min_length 9)."""
    return make_task("cwe", 40)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 24 or 256: one word to return."""
    return {"num_common": 1, "word_vocab": 8}


def most_common(row: np.ndarray, k: int, word_vocab: int = 32) -> list[int]:
    """The k most frequent words of ``row``, by Python's Counter (ties: first seen), then
    words absent from it, lowest id first, when fewer than k occur."""
    found = [w for w, _ in Counter(row.tolist()).most_common(k)]
    absent = [w for w in range(WORD_START, WORD_START + word_vocab) if w not in found]
    return found + absent[: k - len(found)]


def check_most_common(k: int, tokens, targets, mask, word_vocab: int = 32) -> None:
    """Each row: words, QUERY, then the k most common words (Counter), the scored ones."""
    length = tokens.shape[1]
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        words = row_tok[: length - k]
        assert row_tok[length - k] == 0 and np.all(words >= WORD_START)
        np.testing.assert_array_equal(row_mask, np.arange(length) >= length - k)
        np.testing.assert_array_equal(row_tgt[row_mask], most_common(words, k, word_vocab))


def check_cwe(task: CommonWordsTask, tokens, targets, mask) -> None:
    check_most_common(task.num_common, tokens, targets, mask, task.word_vocab)
    length, k = tokens.shape[1], task.num_common
    c, u = task.counts(length)
    for row in tokens:
        counts = Counter(row[: length - k].tolist())
        ranked = sorted(counts.values(), reverse=True)
        assert ranked[:k] == [c] * k and max(ranked[k:], default=0) <= u < c


@FAST
@given(length=st.integers(9, 300), k=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_cwe_answer_is_counter_most_common(length: int, k: int, seed: int) -> None:
    task = make_task("cwe", 40, num_common=k, word_vocab=20)
    length = max(length, task.min_length())
    check_cwe(task, *as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed))))


def test_cwe_counts_by_hand() -> None:
    """n = 97 words, k = 3, U = 29, r = 4: c = ceil(388 / 41) = 10, the other 67 slots cycle
    through 29 words, at most ceil(67 / 29) = 3 each; at n = 6: c = 2, none left."""
    task = make_task("cwe", 40)
    assert task.counts(100) == (10, 3)
    assert task.counts(9) == (2, 0)
    # U = 3 others, r = 1.2, n = 7: c = ceil(8.4 / 4.2) = 2 and 5 slots over 3 words: 2 each
    tight = make_task("cwe", 40, num_common=1, common_ratio=1.2, word_vocab=4)
    with pytest.raises(ValueError, match="common words appear 2 times and others up to 2"):
        tight.validate(8)


def test_oracle_scores_one_and_guessers_score_chance() -> None:
    """Counter.most_common of the tokens: accuracy and exact match 1. A uniform guess among
    the 32 words: accuracy 1/32 (4 s.e. over 128 x 3 tokens), exact match ~ 0; the uniform
    distribution over them: loss ln 32."""
    chance_levels(make_task("cwe", 40), k=3)


def chance_levels(task, k: int) -> None:
    """The oracle and guesser checks of a word-list task with 32 words and k answers."""

    def solve(task, row):
        return most_common(row[: len(row) - k], k)

    acc, exact, _ = scores(task, 60, oracle(task, solve))
    assert (acc, exact) == (1.0, 1.0)
    words = np.arange(WORD_START, WORD_START + 32)
    acc, exact, _ = scores(task, 60, guesser(task, words, seed=2))
    p, n = 1 / 32, 128 * k
    assert abs(acc - p) < 4 * math.sqrt(p * (1 - p) / n) and exact == 0.0
    _, _, loss = scores(task, 60, guesser(task, words, uniform=True))
    assert loss == pytest.approx(math.log(32), rel=1e-6)

"""Tests for rope_lab.tasks.fwe: the answer equals Python's ``Counter.most_common``, the Zipf
law, an oracle scores 1 and a guess scores 1 / word_vocab."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.tasks import make_task
from rope_lab.tasks.fwe import FrequentWordsTask
from rope_lab.tasks.sampling import sample_batch
from rope_lab.tasks.words import WORD_START
from tests.tasks.common import FAST, as_numpy
from tests.tasks.test_cwe import chance_levels, check_most_common

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {"num_frequent": (int, 3), "alpha": (float, 2.0), "word_vocab": (int, 32)}


def example(text_path: str) -> FrequentWordsTask:
    """The task the shared tests sample (min_length 6)."""
    return make_task("fwe", 40)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 24 or 256: one word to return."""
    return {"num_frequent": 1, "word_vocab": 8}


def check_fwe(task: FrequentWordsTask, tokens, targets, mask) -> None:
    check_most_common(task.num_frequent, tokens, targets, mask, task.word_vocab)
    assert np.all(tokens[:, : tokens.shape[1] - task.num_frequent] < WORD_START + task.word_vocab)


@FAST
@given(length=st.integers(6, 300), alpha=st.floats(0.5, 3.0), seed=st.integers(0, 2**31 - 1))
def test_fwe_answer_is_counter_most_common(length: int, alpha: float, seed: int) -> None:
    task = make_task("fwe", 40, alpha=alpha)
    check_fwe(task, *as_numpy(sample_batch(task, 4, length, key=jax.random.key(seed))))


def test_fwe_follows_the_zipf_law() -> None:
    """Over 64 x 1000 words, the share of each sequence's rank-1 word is P(1) =
    1 / sum_r r^-2 (r <= 32) = 0.6195 to within 0.01."""
    task = make_task("fwe", 40)
    p1 = 1 / sum(r**-2.0 for r in range(1, 33))
    assert task.probabilities()[0] == pytest.approx(p1) and p1 == pytest.approx(0.6195, abs=1e-4)
    tokens = np.asarray(sample_batch(task, 64, 1003, key=jax.random.key(0)).tokens)[:, :1000]
    share = np.mean([np.bincount(r).max() / 1000 for r in tokens])
    assert abs(share - p1) < 0.01


def test_oracle_scores_one_and_guessers_score_chance() -> None:
    """Counter.most_common of the tokens: accuracy and exact match 1; a uniform guess among
    the 32 words 1/32; the uniform distribution over them: loss ln 32 (`chance_levels`)."""
    chance_levels(make_task("fwe", 40), k=3)

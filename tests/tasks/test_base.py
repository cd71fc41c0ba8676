"""Laws every task obeys (masks, shifted targets, determinism, minimum length) and the shared
parameter, vocabulary and length checks."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import jax
import numpy as np
import pytest

from rope_lab.tasks import (
    TASKS,
    make_task,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, LENGTHS, as_numpy, task_module


def checker(name: str) -> Callable[..., None]:
    """The reference checker of task `name`, `check_<name>` in its own test module: it
    recomputes from the returned tokens where the answers are and what they are."""
    check = getattr(task_module(name), f"check_{name}", None)
    assert callable(check), f"{task_module(name).__name__} defines no check_{name}"
    return check


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("name", list(TASKS))
def test_batch_shapes_shift_and_laws(name: str, length: int, tasks: dict, batches: dict) -> None:
    task = tasks[name]
    tokens, targets, mask = batches[name, length]
    for arr, dtype in ((tokens, np.int32), (targets, np.int32), (mask, np.bool_)):
        assert arr.shape == (BATCH, length)
        assert arr.dtype == dtype
    assert tokens.min() >= 0 and tokens.max() < task.vocab_size
    assert targets.min() >= 0 and targets.max() < task.vocab_size
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])  # shifted by one
    if getattr(task_module(name), "EVERY_ROW_SCORED", True):
        assert mask.any(axis=1).all()
    else:
        assert mask.any()  # some row has a scored target (flip-flop: a read)
    checker(name)(task, tokens, targets, mask)


@pytest.mark.parametrize("name", list(TASKS))
def test_determinism_and_key_dependence(name: str, tasks: dict, batches: dict) -> None:
    task, ref = tasks[name], batches[name, 64]
    again = as_numpy(sample_batch(task, BATCH, 64, key=jax.random.key(64)))
    other = as_numpy(sample_batch(task, BATCH, 64, key=jax.random.key(65)))
    for x, y in zip(ref, again, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(ref[0], other[0])
    assert not np.array_equal(ref[0][0], ref[0][1])  # rows of one batch differ too


def test_sample_method_matches_sample_batch(tasks: dict, batches: dict) -> None:
    """Task.sample under a user's jit (operands closed over) equals the sample_batch wrapper."""
    task = tasks["lm_synthetic"]
    direct = as_numpy(
        jax.jit(task.sample, static_argnums=(0, 1))(BATCH, 16, key=jax.random.key(16))
    )
    for x, y in zip(direct, batches["lm_synthetic", 16], strict=True):
        np.testing.assert_array_equal(x, y)
    # operands passed explicitly (how a training step avoids embedding them as constants)
    step = jax.jit(lambda ops, key: task.sample_from(ops, BATCH, 16, key=key))
    for x, y in zip(as_numpy(step(task.operands(), jax.random.key(16))), direct, strict=True):
        np.testing.assert_array_equal(x, y)


def test_tasks_are_hashable_static_args(text_file: str) -> None:
    a = make_task("passkey", 32, needle_length=3)
    b = make_task("passkey", 32, needle_length=3)
    assert a == b and hash(a) == hash(b)
    assert a != make_task("passkey", 32, needle_length=4)
    t1 = make_task("lm_text", 256, path=text_file)
    t2 = make_task("lm_text", 256, path=text_file)
    assert t1 == t2 and hash(t1) == hash(t2)
    assert t1.data is t2.data  # read once, shared through the cache
    assert t1.data.dtype == np.uint8
    restored = pickle.loads(pickle.dumps(t1))
    assert restored == t1 and restored.data.size == 3000


@pytest.mark.parametrize("name", list(TASKS))
def test_min_length_is_generated(name: str, tasks: dict) -> None:
    task = tasks[name]
    length = task.min_length()
    tokens, targets, mask = as_numpy(sample_batch(task, BATCH, length, key=jax.random.key(0)))
    assert tokens.shape == (BATCH, length)
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    checker(name)(task, tokens, targets, mask)
    with pytest.raises(ValueError, match=rf"length={length - 1} is too short, need length >= "):
        sample_batch(task, BATCH, length - 1, key=jax.random.key(0))


@pytest.mark.parametrize(
    ("name", "params", "pattern"),
    [
        ("passkey", {"needle_length": 0}, "needle_length must be >= 1, got needle_length=0"),
        ("passkey", {"depth": 1.5}, r"depth must be in \[0.0, 1.0\], got depth=1.5"),
        ("passkey", {"needle_length": 2.5}, "needle_length must be an integer"),
        ("mqar", {"pair_density": 0.5}, "pair_density must be in"),
        ("copy", {"segment_fraction": 0.0}, r"segment_fraction must be in \(0.0, 0.5\]"),
        ("copy", {"segment_length": -1}, "segment_length must be >= 1"),
        ("flipflop", {"p_ignore": -0.1}, "p_ignore must be in"),
        ("lm_synthetic", {"copy_prob": 2.0}, "copy_prob must be in"),
        ("lm_synthetic", {"min_lag": 0}, "min_lag must be >= 1"),
        ("lm_synthetic", {"branching": True}, "branching must be an integer"),
    ],
)
def test_invalid_param_values(name: str, params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_task(name, 64, **params)


@pytest.mark.parametrize(
    ("name", "vocab", "params"),
    [
        ("passkey", 12, {}),
        ("mqar", 17, {}),
        ("copy", 2, {}),
        ("flipflop", 4, {}),
        ("lm_synthetic", 1, {}),
    ],
)
def test_too_small_vocab(name: str, vocab: int, params: dict) -> None:
    with pytest.raises(ValueError, match=rf"vocab_size={vocab} is too small"):
        make_task(name, vocab, **params)
    make_task(name, vocab + 1, **params)  # one more is enough


@pytest.mark.parametrize("name", list(TASKS))
def test_vocab_below_the_minimum_is_rejected(name: str, tasks: dict) -> None:
    """Every task, at its example's parameters: vocab_size = min_vocab_size() - 1 is rejected
    (naming the minimum), min_vocab_size() builds."""
    task = tasks[name]
    need = task.min_vocab_size()
    assert 1 <= need <= task.vocab_size
    if need > 1:
        with pytest.raises(ValueError, match=rf"vocab_size={need - 1} is too small, need .*{need}"):
            make_task(name, need - 1, **task.values())
    assert make_task(name, need, **task.values()).vocab_size == need


def test_too_short_length() -> None:
    task = make_task("passkey", 32, needle_length=5)
    with pytest.raises(ValueError, match=r"length=10 is too short, need length >= 11"):
        sample_batch(task, 2, 10, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"length=31 is too short, need length >= 32"):
        make_task("mqar", 64).sample(2, 31, key=jax.random.key(0))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        sample_batch(task, 0, 32, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"length must be an integer, got length=32\.0"):
        sample_batch(task, 2, 32.0, key=jax.random.key(0))

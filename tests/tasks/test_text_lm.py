"""Tests for rope_lab.tasks.text_lm: windows, errors and the held-out evaluation split."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.tasks import (
    TextLMTask,
    make_task,
    text_split_bounds,
)
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, as_numpy

# What the shared task tests read of this task (tests/tasks/common.py, `task_module`).
PARAMS = {
    "path": (str, dataclasses.MISSING),
    "eval_fraction": (float, 0.1),
    "eval_path": (str | None, None),
}


def example(text_path: str) -> TextLMTask:
    """The text LM of `text_path` that the shared tests sample and check with `check_lm_text`."""
    return make_task("lm_text", 256, path=text_path)


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256."""
    return {"path": text_path}


def check_lm_text(task: TextLMTask, tokens, targets, mask) -> None:
    """Every position of a text window is scored (the windows themselves: below)."""
    assert mask.all()


def test_lm_text_windows(text_file: str, tasks: dict, batches: dict) -> None:
    task = tasks["lm_text"]
    data = np.fromfile(text_file, dtype=np.uint8)
    tokens, targets, mask = batches["lm_text", 64]
    assert mask.all()
    starts = set()
    for row_tok, row_tgt in zip(tokens, targets, strict=True):
        window = np.append(row_tok, row_tgt[-1])
        hits = [s for s in range(len(data) - 64) if np.array_equal(data[s : s + 65], window)]
        assert hits, "window is not a contiguous slice of the file"
        starts.add(hits[0])
    assert len(starts) > BATCH // 2
    # the whole training split (the first 2700 of 3000 bytes) as one window
    tokens, targets, _ = as_numpy(sample_batch(task, 2, 2699, key=jax.random.key(0)))
    np.testing.assert_array_equal(tokens[0], data[:2699])
    np.testing.assert_array_equal(targets[1], data[1:2700])
    # the whole held-out split as one window
    tokens, targets, _ = as_numpy(sample_batch(task, 2, 299, split="eval", key=jax.random.key(0)))
    np.testing.assert_array_equal(tokens[0], data[2700:-1])
    np.testing.assert_array_equal(targets[1], data[2701:])
    # eval_fraction 0: evaluation reads the training text, the whole file
    whole = make_task("lm_text", 256, path=text_file, eval_fraction=0.0)
    tokens, _, _ = as_numpy(sample_batch(whole, 2, 2999, split="eval", key=jax.random.key(0)))
    np.testing.assert_array_equal(tokens[0], data[:-1])


def test_lm_text_errors(tmp_path, text_file: str) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(ValueError, match=r"path=.*nope\.txt.* does not exist"):
        make_task("lm_text", 256, path=str(missing))
    with pytest.raises(ValueError, match="needs parameter"):
        make_task("lm_text", 256)
    with pytest.raises(ValueError, match="vocab_size=255 is too small"):
        make_task("lm_text", 255, path=text_file)
    task = TextLMTask(256, path=text_file)
    with pytest.raises(
        ValueError, match=r"train split .* has 2700 bytes, too short for length=2700"
    ):
        sample_batch(task, 2, 2700, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"eval split .* has 300 bytes, too short for length=300"):
        sample_batch(task, 2, 300, split="eval", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"eval_fraction must be in \[0.0, 0.9\]"):
        make_task("lm_text", 256, path=text_file, eval_fraction=0.95)
    with pytest.raises(ValueError, match="split must be one of train, eval"):
        task.operands("test")


@given(size=st.integers(2, 10**7), fraction=st.floats(0.0, 0.9))
def test_text_split_bounds_partition_the_file(size: int, fraction: float) -> None:
    bounds = text_split_bounds(size, fraction)
    held_out = round(fraction * size)
    if held_out == 0:
        assert bounds == {"train": (0, size), "eval": (0, size)}
        return
    assert bounds["train"] == (0, size - held_out)  # contiguous, disjoint, covering the file
    assert bounds["eval"] == (size - held_out, size)


def _two_part_corpus(folder, size: int = 2000, fraction: float = 0.1):
    """A file whose training split is all b"a" and whose held-out split is all b"b"."""
    start, stop = text_split_bounds(size, fraction)["eval"]
    path = folder / "two_parts.txt"
    path.write_bytes(b"a" * start + b"b" * (stop - start))
    return str(path)


def test_training_evaluation_and_probes_read_their_own_split(tmp_path) -> None:
    """Training only ever sees b"a"; evaluation and NTK probes only b"b": the trained model
    predicts "a" everywhere, so held-out accuracy is exactly 0 (1 if evaluation read the
    training text)."""
    from rope_lab.ntk.tracking import draw_probes
    from rope_lab.trial.evaluate import evaluate_model
    from rope_lab.trial.train import make_task_from, train
    from tests.helpers import tiny_trial

    cfg = tiny_trial(
        "alibi",
        task="lm_text",
        vocab=256,
        task_params=(("path", _two_part_corpus(tmp_path)),),
        steps=30,
        lr=1e-2,
    )
    task = make_task_from(cfg)
    for split, byte in (("train", ord("a")), ("eval", ord("b"))):
        batch = sample_batch(task, 16, 64, split=split, key=jax.random.key(1))
        assert (np.asarray(batch.tokens) == byte).all()
    probes = draw_probes(cfg, task)
    assert (probes.short == ord("b")).all()
    assert all((p == ord("b")).all() for p in probes.long.values())
    model = train(cfg).model
    rows = evaluate_model(model, task, cfg, step=cfg.train.steps)
    whole = [r for r in rows if r["position_bucket"] is None]
    assert whole and all(r["accuracy"] == 0.0 for r in whole)
    assert all(r["loss"] > 3.0 for r in whole)  # "b" never seen: far above the trained loss


def test_operands_made_inside_a_trace_are_concrete(tmp_path) -> None:
    """The first operands() call of a fresh corpus happening under jit (as in a jitted probe
    sampler) must not leave a tracer in the cache: later draws reuse the cached array."""
    path = tmp_path / "fresh.txt"
    path.write_bytes(bytes(range(256)) * 4)
    task = make_task("lm_text", 256, path=str(path))

    @jax.jit
    def first_draw(key):
        return task.sample(2, 8, split="eval", key=key).tokens

    first = np.asarray(first_draw(jax.random.key(0)))
    (cached,) = task.operands("eval")
    assert not isinstance(cached, jax.core.Tracer)
    again = sample_batch(task, 2, 8, split="eval", key=jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(again.tokens), first)
    start, stop = text_split_bounds(1024, 0.1)["eval"]
    np.testing.assert_array_equal(
        np.asarray(cached), np.frombuffer(path.read_bytes(), np.uint8)[start:stop]
    )


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 300), st.integers(1, 40), st.integers(1, 40))
def test_text_windows_read_each_byte_once(size: int, length: int, stride: int) -> None:
    """Non-overlapping windows tile the text; sliding windows score every target byte after
    the first window exactly once, each with at least length - stride bytes before it."""
    from rope_lab.tasks.text_lm import text_windows

    data = (
        np.arange(size, dtype=np.int64).astype(np.uint8)
        if size < 256
        else (np.arange(size) % 251).astype(np.uint8)
    )
    if size - 1 < length:
        with pytest.raises(ValueError, match="too few for one window"):
            text_windows(data, length, "nonoverlapping")
        return
    tokens, targets, mask = text_windows(data, length, "nonoverlapping")
    w = (size - 1) // length
    assert tokens.shape == (w, length) and mask.all()
    np.testing.assert_array_equal(tokens.ravel(), data[: w * length])
    np.testing.assert_array_equal(targets.ravel(), data[1 : w * length + 1])
    stride = min(stride, length)
    tokens, targets, mask = text_windows(data, length, "sliding", stride)
    starts = np.arange(0, size - length, stride)
    assert tokens.shape[0] == starts.size
    scored = (starts[:, None] + np.arange(length)[None, :] + 1)[mask]  # target byte indices
    assert np.unique(scored).size == scored.size  # each once
    np.testing.assert_array_equal(np.sort(scored), np.arange(1, starts[-1] + length + 1))
    first_scored = np.argmax(mask[1:], axis=1) if len(mask) > 1 else np.array([], dtype=int)
    assert (first_scored >= length - stride).all()  # context before every scored byte
    with pytest.raises(ValueError, match="unknown text protocol"):
        text_windows(data, length, "random")


def test_eval_path_trains_on_the_whole_file_and_evaluates_on_the_other(
    tmp_path, text_file: str
) -> None:
    """With `eval_path` the training split is all of `path` and the eval split all of
    `eval_path` (a whole-split window reads each file byte for byte); a pickled task reads
    both again; an `eval_fraction` beside it, or a short eval file, is a clear error."""
    import pickle

    data = np.fromfile(text_file, dtype=np.uint8)
    other = np.frombuffer(bytes(range(256)) * 2, dtype=np.uint8)
    held = tmp_path / "held_out.txt"
    held.write_bytes(other.tobytes())
    task = make_task("lm_text", 256, path=text_file, eval_path=str(held))
    tokens, targets, _ = as_numpy(sample_batch(task, 2, data.size - 1, key=jax.random.key(0)))
    np.testing.assert_array_equal(tokens[0], data[:-1])
    np.testing.assert_array_equal(targets[0], data[1:])
    for t in (task, pickle.loads(pickle.dumps(task))):
        tokens, targets, _ = as_numpy(
            sample_batch(t, 2, other.size - 1, split="eval", key=jax.random.key(0))
        )
        np.testing.assert_array_equal(tokens[1], other[:-1])
        np.testing.assert_array_equal(targets[1], other[1:])
    with pytest.raises(ValueError, match=r"eval_fraction=0.2 and eval_path=.* give one"):
        make_task("lm_text", 256, path=text_file, eval_path=str(held), eval_fraction=0.2)
    with pytest.raises(ValueError, match=r"eval split of eval_path=.*held_out.* has 512 bytes"):
        sample_batch(task, 2, 512, split="eval", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"nope\.txt.* does not exist"):
        make_task("lm_text", 256, path=text_file, eval_path=str(tmp_path / "nope.txt"))

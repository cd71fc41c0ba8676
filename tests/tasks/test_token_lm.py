"""Tests for rope_lab.tasks.token_lm: memory-mapped training windows of (seed, step), the eval
split, the vocabulary check, and training on a file larger than the memory it may use."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from rope_lab.corpus.prepare import write_ids
from rope_lab.tasks import make_task
from rope_lab.tasks.sampling import sample_batch
from rope_lab.tasks.windows import host_window_starts
from tests.tasks.common import as_numpy

PARAMS = {"path": (str, dataclasses.MISSING)}


@cache
def corpus_of(text_path: str) -> str:
    """A bytes corpus of the file's bytes: the first 90% trains, the rest is held out."""
    data = np.fromfile(text_path, dtype=np.uint8)
    cut = round(0.9 * data.size)
    return str(write_ids(Path(tempfile.mkdtemp()) / "corpus", data[:cut], data[cut:]))


def example(text_path: str):
    """The token LM the shared tests sample: a bytes corpus of `text_path`."""
    return make_task("lm_tokens", 256, path=corpus_of(text_path))


def tiny_params(text_path: str) -> dict[str, Any]:
    """Parameters for 8-token trials at vocabulary 256."""
    return {"path": corpus_of(text_path)}


def check_lm_tokens(task, tokens, targets, mask) -> None:
    """Every position of a window is scored (the windows themselves: below)."""
    assert mask.all()


def _windows_of(task, steps, seed=3, batch=4, length=16) -> list[np.ndarray]:
    return [task.host_batch(batch, length, seed=seed, step=s)[0] for s in steps]


def test_host_windows_are_slices_of_the_train_file_and_a_function_of_seed_and_step(
    tmp_path,
) -> None:
    rng = np.random.default_rng(0)
    train, held = rng.integers(0, 256, 5000), rng.integers(0, 256, 600)
    path = write_ids(tmp_path / "c", train, held)
    task = make_task("lm_tokens", 256, path=str(path))
    first = _windows_of(task, range(10))
    for w in first:
        assert w.shape == (4, 17) and w.dtype == np.int32
        for row in w:
            starts = [s for s in range(train.size - 16) if np.array_equal(train[s : s + 17], row)]
            assert starts, "a window is not a contiguous slice of train.bin"
    fresh = make_task("lm_tokens", 256, path=str(path))  # a new task, as after a restart
    for a, b in zip(first[5:], _windows_of(fresh, range(5, 10)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[0], _windows_of(task, [0], seed=4)[0])
    # the sampler reads the gathered windows in place of its key
    batch = as_numpy(task.sample_from((first[0],), 4, 16, key=jax.random.key(0)))
    np.testing.assert_array_equal(batch[0], first[0][:, :-1])
    np.testing.assert_array_equal(batch[1], first[0][:, 1:])
    # evaluation reads eval.bin whole
    tokens, targets, _ = as_numpy(sample_batch(task, 2, 599, split="eval", key=jax.random.key(0)))
    np.testing.assert_array_equal(tokens[0], held[:-1])
    np.testing.assert_array_equal(targets[1], held[1:])


def test_training_windows_start_anywhere_from_0_to_the_last_that_fits(tmp_path) -> None:
    """train.bin of ids 0..39, L = 8: 200 steps of 8 windows start at every one of
    0..31 = size - (L + 1) and nowhere else, so the last window, ending on the last token, is
    drawn; the starts alone cover exactly [0, n) for small n."""
    size, length = 40, 8
    path = write_ids(tmp_path / "c", np.arange(size), np.arange(20))
    task = make_task("lm_tokens", 256, path=str(path))
    starts = set()
    for w in _windows_of(task, range(200), batch=8, length=length):
        for row in w:
            np.testing.assert_array_equal(row, np.arange(row[0], row[0] + length + 1))
            starts.add(int(row[0]))
    assert starts == set(range(size - length))
    for n in (1, 2, 5):
        drawn = np.concatenate([host_window_starts(0, step, 16, n) for step in range(20)])
        assert set(drawn.tolist()) == set(range(n))


def test_vocabulary_and_split_errors_name_the_numbers(tmp_path) -> None:
    path = str(write_ids(tmp_path / "c", np.arange(100) % 256, np.arange(20)))
    with pytest.raises(ValueError, match=r"task.vocab_size=300 but the corpus .* vocab_size 256"):
        make_task("lm_tokens", 300, path=path)
    with pytest.raises(ValueError, match=r"vocab_size=200 is too small, need vocab_size >= 256"):
        make_task("lm_tokens", 200, path=path)
    task = make_task("lm_tokens", 256, path=path)
    with pytest.raises(
        ValueError, match=r"eval split of .* has 20 tokens, too short for length=20"
    ):
        task.validate(20, "eval")
    with pytest.raises(ValueError, match=r"no meta.json, not a prepared corpus"):
        make_task("lm_tokens", 256, path=str(tmp_path))


def test_truncated_bin_is_refused_naming_the_file(tmp_path) -> None:
    path = write_ids(tmp_path / "c", np.arange(100) % 256, np.arange(20))
    with open(path / "train.bin", "r+b") as f:
        f.truncate(150)
    with pytest.raises(ValueError, match=r"train\.bin: 150 bytes, but meta.json says 100 <u2"):
        make_task("lm_tokens", 256, path=str(path))


def test_resumed_training_reads_the_windows_it_would_have_read(tmp_path) -> None:
    """Steps 0..9 in one run and 0..4 then a restart at 5 (a fresh task, as after a kill) feed
    identical windows: recorded at the host_batch boundary of the training loop."""
    from rope_lab.trial.train import train
    from tests.helpers import recorded_token_windows, tiny_trial

    path = write_ids(
        tmp_path / "c", np.random.default_rng(1).integers(0, 256, 4000), np.arange(300)
    )
    cfg = tiny_trial(
        "rope", task="lm_tokens", vocab=256, task_params=(("path", str(path)),), steps=10
    )
    with recorded_token_windows() as read:
        whole = train(cfg)
        straight = {step: windows for _, step, windows in read}
        read.clear()
        train(cfg, model=whole.model, start_step=5)  # builds its task afresh
    seen = [(step, windows) for _, step, windows in read]
    assert sorted(dict(seen)) == list(range(5, 10))
    for step, windows in seen:
        np.testing.assert_array_equal(windows, straight[step])
    assert whole.traces == 1


RSS_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    from rope_lab.trial.train import train
    from tests.helpers import recorded_token_windows, tiny_trial
    cfg = tiny_trial("rope", task="lm_tokens", vocab=256, task_params=(("path", sys.argv[1]),),
                     steps=40, length=64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    train(cfg)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) * 1024)
    """
)


@pytest.mark.slow  # ~20 s on 2 cores
def test_training_on_a_file_larger_than_the_memory_growth_it_may_use(tmp_path) -> None:
    """A 4 GiB train.bin (2**31 uint16 tokens; sparse, so it costs no disk): a whole 40-step
    trial, compilation included, grows the process' peak resident set by less than a quarter of
    the file (the budget); reading the file whole would add 4 GiB."""
    path = write_ids(tmp_path / "big", np.arange(1000) % 256, np.arange(1000) % 256)
    size = 2**32
    with open(path / "train.bin", "r+b") as f:
        f.seek(size // 2)
        f.write(np.arange(4096, dtype=np.uint16).tobytes())  # some non-zero tokens
        f.truncate(size)
    meta = json.loads((path / "meta.json").read_text())
    meta["train_tokens"] = size // 2
    (path / "meta.json").write_text(json.dumps(meta))
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    growth = int(out.stdout.strip().splitlines()[-1])
    print(f"peak RSS growth {growth / 2**20:.1f} MiB training on a {size / 2**30:.0f} GiB file")
    assert growth < size / 4


# nonoverlapping by default (it also pins the BPE rows' scored bytes); random -m slow
@pytest.mark.parametrize(
    "protocol", [pytest.param("random", marks=pytest.mark.slow), "nonoverlapping"]
)
def test_bits_per_byte_of_a_bytes_corpus_is_the_loss_over_ln_2(tmp_path, protocol) -> None:
    """Every token of a bytes corpus is one byte: bits per byte = loss / ln 2 exactly, for
    lm_tokens and lm_text alike; a BPE corpus' rows divide by the scored tokens' bytes."""
    import math

    from rope_lab.config import replace
    from rope_lab.corpus import prepare
    from rope_lab.model.factory import make_model
    from rope_lab.tasks import task_from_config
    from rope_lab.trial.evaluate import evaluate_model
    from tests.helpers import tiny_trial

    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(f"section {i}: " + "lorem ipsum dolor " * 9 for i in range(30)))
    corpora = {
        "bytes": prepare([str(text)], tmp_path / "b", "bytes", progress=False),
        "bpe": prepare([str(text)], tmp_path / "p", "bpe:300", progress=False),
    }
    for name, params in (
        ("lm_tokens", {"path": str(corpora["bytes"].folder)}),
        ("lm_text", {"path": str(text)}),
    ):
        cfg = tiny_trial("rope", task=name, vocab=256, task_params=tuple(params.items()))
        cfg = replace(cfg, **{"eval.text_protocol": protocol})
        rows = evaluate_model(make_model(cfg), task_from_config(cfg.task), cfg, step=0)
        assert rows and all(r["bits_per_byte"] == r["loss"] / math.log(2) for r in rows), name
    vocab = corpora["bpe"].meta["vocab_size"]
    cfg = tiny_trial(
        "rope", task="lm_tokens", vocab=vocab, task_params=(("path", str(tmp_path / "p")),)
    )
    cfg = replace(cfg, **{"eval.text_protocol": protocol, "eval.length_multipliers": (1.0,)})
    task = task_from_config(cfg.task)
    rows = evaluate_model(make_model(cfg), task, cfg, step=0)
    whole = rows[0]
    if protocol == "nonoverlapping":  # the scored targets, re-derived from eval.bin
        from rope_lab.tasks.windows import text_windows

        _, targets, mask = text_windows(np.asarray(task.split_tokens("eval")), 16, protocol)
        nbytes = task.token_bytes()[targets[mask]].sum()
        expected = whole["loss"] * mask.sum() / nbytes / math.log(2)
        assert whole["bits_per_byte"] == pytest.approx(expected, rel=1e-9)
    assert whole["bits_per_byte"] < whole["loss"] / math.log(2) / 2  # BPE tokens: > 2 bytes


def test_a_corpus_prepared_again_with_other_tokens_gets_other_trial_ids(tmp_path) -> None:
    """Trial ids hash the corpus' fingerprint, not only its folder: the same folder written
    again with other token ids trains other models; the same ids give the same trial."""
    from rope_lab.config import TrialConfig, from_dict

    def trial_id() -> str:
        task = {"name": "lm_tokens", "vocab_size": 256, "params": {"path": str(path)}}
        return from_dict(TrialConfig, {"task": task}).trial_id

    path = write_ids(tmp_path / "c", np.arange(100) % 256, np.arange(20))
    first = trial_id()
    write_ids(tmp_path / "c", np.arange(100) % 256, np.arange(20))
    assert trial_id() == first
    write_ids(tmp_path / "c", np.arange(100)[::-1] % 256, np.arange(20))
    assert trial_id() != first

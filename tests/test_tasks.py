"""Tests for rope_lab.tasks: masks, targets, determinism, task laws and error messages."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rope_lab.tasks import (
    TASKS,
    Batch,
    CopyTask,
    FlipFlopTask,
    MQARTask,
    PasskeyTask,
    SyntheticLMTask,
    TextLMTask,
    make_task,
    sample_batch,
    text_split_bounds,
)

LENGTHS = [16, 64, 257]
BATCH = 8


def _np(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.asarray(batch.tokens), np.asarray(batch.targets), np.asarray(batch.mask)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    rng = np.random.default_rng(0)
    path.write_bytes(rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    return str(path)


def _all_tasks(text_path: str) -> list:
    return [
        make_task("passkey", 32),
        make_task("mqar", 40, num_pairs=4),
        make_task("copy", 20),
        make_task("flipflop", 8),
        make_task("lm_synthetic", 50, min_lag=8, copy_prob=0.1),
        make_task("lm_text", 256, path=text_path),
    ]


# ------------------------------------------------------------------------------------------
# reference checkers: recompute from the returned tokens where answers are and what they are
# ------------------------------------------------------------------------------------------


def check_passkey(task: PasskeyTask, tokens, targets, mask) -> None:
    k, length = task.needle_length, tokens.shape[1]
    for row_tok, row_tgt, row_mask in zip(tokens, targets, mask, strict=True):
        (key_pos,) = np.flatnonzero(row_tok == task.KEY)
        (query_pos,) = np.flatnonzero(row_tok == task.QUERY)
        needle = row_tok[key_pos + 1 : key_pos + 1 + k]
        assert len(needle) == k
        assert np.all((needle >= task.DIGIT_START) & (needle < task.filler_start))
        assert query_pos == length - k
        np.testing.assert_array_equal(row_mask, np.arange(length) >= query_pos)
        np.testing.assert_array_equal(row_tgt[row_mask], needle)
        np.testing.assert_array_equal(row_tok[query_pos + 1 :], needle[:-1])
        other = np.ones(length, bool)
        other[key_pos : key_pos + 1 + k] = False
        other[query_pos:] = False
        assert np.all(row_tok[other] >= task.filler_start)


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


def check_lm_synthetic(task: SyntheticLMTask, tokens, targets, mask) -> None:
    """Every token is a Markov successor of its predecessor or a copy from lag >= min_lag."""
    successors, _ = task.transition_table()
    assert mask.all()
    for row_tok, row_tgt in zip(tokens, targets, strict=True):
        seq = np.append(row_tok, row_tgt[-1])
        for t in range(1, len(seq)):
            markov_ok = seq[t] in successors[seq[t - 1]]
            copy_ok = t >= task.min_lag and seq[t] in seq[: t - task.min_lag + 1]
            assert markov_ok or copy_ok, t


CHECKERS = {
    "passkey": check_passkey,
    "mqar": check_mqar,
    "copy": check_copy,
    "flipflop": check_flipflop,
    "lm_synthetic": check_lm_synthetic,
}


# ------------------------------------------------------------------------------------------
# generic properties (one jit compilation per task and length: batches are shared)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks(text_file: str) -> dict:
    return {task.name: task for task in _all_tasks(text_file)}


@pytest.fixture(scope="module")
def batches(tasks: dict) -> dict:
    """(name, length) -> numpy (tokens, targets, mask) sampled with key(length)."""
    return {
        (name, length): _np(sample_batch(task, jax.random.key(length), BATCH, length))
        for name, task in tasks.items()
        for length in LENGTHS
    }


def test_registry_names() -> None:
    assert set(TASKS) == {"passkey", "mqar", "copy", "flipflop", "lm_synthetic", "lm_text"}
    for name, cls in TASKS.items():
        assert cls.name == name
    assert TASKS["passkey"] is PasskeyTask and TASKS["mqar"] is MQARTask
    assert TASKS["lm_synthetic"] is SyntheticLMTask and TASKS["lm_text"] is TextLMTask


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
    if name == "flipflop":
        assert mask.any()  # some row has a read
    else:
        assert mask.any(axis=1).all()
    if name in CHECKERS:
        CHECKERS[name](task, tokens, targets, mask)
    else:
        assert mask.all()


@pytest.mark.parametrize("name", list(TASKS))
def test_determinism_and_key_dependence(name: str, tasks: dict, batches: dict) -> None:
    task, ref = tasks[name], batches[name, 64]
    again = _np(sample_batch(task, jax.random.key(64), BATCH, 64))
    other = _np(sample_batch(task, jax.random.key(65), BATCH, 64))
    for x, y in zip(ref, again, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(ref[0], other[0])
    assert not np.array_equal(ref[0][0], ref[0][1])  # rows of one batch differ too


def test_sample_method_matches_sample_batch(tasks: dict, batches: dict) -> None:
    """Task.sample under a user's jit (operands closed over) equals the sample_batch wrapper."""
    task = tasks["lm_synthetic"]
    direct = _np(jax.jit(task.sample, static_argnums=(1, 2))(jax.random.key(16), BATCH, 16))
    for x, y in zip(direct, batches["lm_synthetic", 16], strict=True):
        np.testing.assert_array_equal(x, y)
    # operands passed explicitly (how a training step avoids embedding them as constants)
    step = jax.jit(lambda ops, key: task.sample_from(ops, key, BATCH, 16))
    for x, y in zip(_np(step(task.operands(), jax.random.key(16))), direct, strict=True):
        np.testing.assert_array_equal(x, y)


def test_legacy_uint32_keys(tasks: dict) -> None:
    task = tasks["passkey"]
    tokens, targets, mask = _np(sample_batch(task, jax.random.PRNGKey(3), BATCH, 16))
    check_passkey(task, tokens, targets, mask)


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


@pytest.mark.parametrize("name", ["passkey", "mqar", "copy", "flipflop", "lm_synthetic", "lm_text"])
def test_min_length_is_generated(name: str, tasks: dict) -> None:
    task = tasks[name]
    length = task.min_length()
    tokens, targets, mask = _np(sample_batch(task, jax.random.key(0), BATCH, length))
    assert tokens.shape == (BATCH, length)
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    if name in CHECKERS:
        CHECKERS[name](task, tokens, targets, mask)
    with pytest.raises(ValueError, match=rf"length={length - 1} is too short, need length >= "):
        sample_batch(task, jax.random.key(0), BATCH, length - 1)


# ------------------------------------------------------------------------------------------
# task-specific behaviour
# ------------------------------------------------------------------------------------------


def test_passkey_depth(tasks: dict) -> None:
    # depth=1.0: the KEY block ends right before QUERY
    task = make_task("passkey", 20, needle_length=3, num_digits=5, depth=1.0)
    tokens, targets, mask = _np(sample_batch(task, jax.random.key(0), BATCH, 64))
    assert np.all(tokens[:, 64 - 3 - 4] == task.KEY)
    check_passkey(task, tokens, targets, mask)
    # default: uniformly random depth, the needle moves around
    task = tasks["passkey"]
    positions = [
        np.argmax(np.asarray(sample_batch(task, jax.random.key(s), BATCH, 257).tokens) == 0, 1)
        for s in range(8)
    ]
    assert len(set(np.concatenate(positions).tolist())) > 30


def test_mqar_pairs_scale_with_length() -> None:
    task = make_task("mqar", 200, num_pairs=4, pair_density=1 / 16)
    assert [task.pairs_for(n) for n in (16, 64, 257, 300)] == [4, 4, 16, 18]
    tokens, targets, mask = _np(sample_batch(task, jax.random.key(0), BATCH, 257))
    check_mqar(task, tokens, targets, mask)
    assert np.all(mask.sum(axis=1) == 16)
    with pytest.raises(ValueError, match="vocab_size=200 is too small for 125 pairs"):
        sample_batch(task, jax.random.key(0), BATCH, 2000)


def test_copy_segment_length(batches: dict) -> None:
    task = make_task("copy", 10)
    assert [task.segment_length_for(n) for n in (3, 16, 64, 257)] == [1, 7, 31, 128]
    for length in LENGTHS:  # default: segment scales with length
        assert np.all(batches["copy", length][2].sum(axis=1) == task.segment_length_for(length))
    fixed = make_task("copy", 10, segment_length=5)
    assert fixed.min_length() == 11
    tokens, targets, mask = _np(sample_batch(fixed, jax.random.key(0), BATCH, 100))
    check_copy(fixed, tokens, targets, mask)
    assert np.all(mask.sum(axis=1) == 5)


def test_flipflop_instruction_frequencies(tasks: dict) -> None:
    task = tasks["flipflop"]  # p_ignore = 0.8
    instr = np.concatenate(
        [
            np.asarray(sample_batch(task, jax.random.key(s), BATCH, 257).tokens)[:, 2::2]
            for s in range(8)
        ]
    )  # the initial write is forced, skip it
    freq = [np.mean(instr == v) for v in (task.W, task.R, task.I)]
    np.testing.assert_allclose(freq, [0.1, 0.1, 0.8], atol=0.02)
    dense = make_task("flipflop", 5, p_ignore=0.0)
    tokens, targets, mask = _np(sample_batch(dense, jax.random.key(0), BATCH, 64))
    assert not np.any(tokens[:, 0::2] == task.I)
    check_flipflop(dense, tokens, targets, mask)


def test_lm_synthetic_source_is_fixed_and_copies_happen() -> None:
    task = make_task("lm_synthetic", 30, branching=3, copy_prob=0.0)
    succ_a, probs_a = task.transition_table()
    assert succ_a.shape == (30, 3) and probs_a.shape == (30, 3)
    np.testing.assert_allclose(probs_a.sum(axis=1), 1.0, rtol=1e-5)
    same = make_task("lm_synthetic", 30, branching=3, copy_prob=0.5)
    np.testing.assert_array_equal(same.transition_table()[0], succ_a)  # seed fixes the source
    other = make_task("lm_synthetic", 30, branching=3, seed=1)
    assert not np.array_equal(other.transition_table()[0], succ_a)
    # pure Markov chain: every transition is a listed successor
    tokens, targets, _ = _np(sample_batch(task, jax.random.key(0), BATCH, 257))
    seq = np.concatenate([tokens, targets[:, -1:]], axis=1)
    assert all(seq[b, t] in succ_a[seq[b, t - 1]] for b in range(BATCH) for t in range(1, 258))
    # always copying after min_lag: every later token repeats one at least min_lag back
    copier = make_task("lm_synthetic", 30, copy_prob=1.0, span_length=5, min_lag=10)
    tokens, targets, mask = _np(sample_batch(copier, jax.random.key(0), BATCH, 257))
    check_lm_synthetic(copier, tokens, targets, mask)
    seq = np.concatenate([tokens, targets[:, -1:]], axis=1)
    lags_seen = set()
    for row in seq:  # spans of 5 start at t = 10, 15, ...; each repeats a block >= 10 back
        for t0 in range(10, 258, 5):
            span = row[t0 : t0 + 5]
            lags = [
                lag
                for lag in range(10, t0 + 1)
                if np.array_equal(row[t0 - lag : t0 - lag + len(span)], span)
            ]
            assert lags, t0
            lags_seen.update(lags)
    assert max(lags_seen) > 100  # the lag range widens with position


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
    tokens, targets, _ = _np(sample_batch(task, jax.random.key(0), 2, 2699))
    np.testing.assert_array_equal(tokens[0], data[:2699])
    np.testing.assert_array_equal(targets[1], data[1:2700])
    # the whole held-out split as one window
    tokens, targets, _ = _np(sample_batch(task, jax.random.key(0), 2, 299, split="eval"))
    np.testing.assert_array_equal(tokens[0], data[2700:-1])
    np.testing.assert_array_equal(targets[1], data[2701:])
    # eval_fraction 0: evaluation reads the training text, the whole file
    whole = make_task("lm_text", 256, path=text_file, eval_fraction=0.0)
    tokens, _, _ = _np(sample_batch(whole, jax.random.key(0), 2, 2999, split="eval"))
    np.testing.assert_array_equal(tokens[0], data[:-1])


# ------------------------------------------------------------------------------------------
# hypothesis property tests: every new length costs one XLA compilation, so the fast suite
# draws few examples; the `slow` variant draws many more.
# ------------------------------------------------------------------------------------------

_FAST = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_LENGTH = st.integers(3, 300)
_SEED = st.integers(0, 2**31 - 1)


def _flipflop_law(length: int, seed: int, p_ignore: float) -> None:
    task = FlipFlopTask(5, p_ignore=p_ignore)
    tokens, targets, mask = _np(sample_batch(task, jax.random.key(seed), 4, length))
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    check_flipflop(task, tokens, targets, mask)


def _copy_law(length: int, seed: int, fraction: float) -> None:
    task = CopyTask(12, segment_fraction=fraction)
    tokens, targets, mask = _np(sample_batch(task, jax.random.key(seed), 4, length))
    np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
    check_copy(task, tokens, targets, mask)


@_FAST
@given(length=_LENGTH, seed=_SEED)
def test_flipflop_law_property(length: int, seed: int) -> None:
    _flipflop_law(length, seed, 0.5)


@_FAST
@given(length=_LENGTH, seed=_SEED)
def test_copy_law_property(length: int, seed: int) -> None:
    _copy_law(length, seed, 0.3)


@pytest.mark.slow
@_SLOW
@given(length=_LENGTH, seed=_SEED, p_ignore=st.sampled_from([0.0, 0.5, 0.8, 0.98]))
def test_flipflop_law_property_extended(length: int, seed: int, p_ignore: float) -> None:
    _flipflop_law(length, seed, p_ignore)


@pytest.mark.slow
@_SLOW
@given(length=_LENGTH, seed=_SEED, fraction=st.sampled_from([0.05, 0.25, 0.5]))
def test_copy_law_property_extended(length: int, seed: int, fraction: float) -> None:
    _copy_law(length, seed, fraction)


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------


def test_unknown_task_lists_names() -> None:
    with pytest.raises(ValueError, match="unknown task 'pasky'") as info:
        make_task("pasky", 32)
    for name in TASKS:
        assert name in str(info.value)
    assert "Did you mean 'passkey'" in str(info.value)


def test_unknown_param_is_named() -> None:
    with pytest.raises(ValueError, match="unknown parameter 'needle_len'") as info:
        make_task("passkey", 32, needle_len=3)
    assert "Did you mean 'needle_length'" in str(info.value)
    with pytest.raises(ValueError, match="unknown parameter 'data'"):
        make_task("copy", 32, data=3)


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


def test_too_short_length() -> None:
    task = make_task("passkey", 32, needle_length=5)
    with pytest.raises(ValueError, match=r"length=10 is too short, need length >= 11"):
        sample_batch(task, jax.random.key(0), 2, 10)
    with pytest.raises(ValueError, match=r"length=31 is too short, need length >= 32"):
        make_task("mqar", 64).sample(jax.random.key(0), 2, 31)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        sample_batch(task, jax.random.key(0), 0, 32)
    with pytest.raises(ValueError, match=r"length must be an integer, got length=32\.0"):
        sample_batch(task, jax.random.key(0), 2, 32.0)


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
        sample_batch(task, jax.random.key(0), 2, 2700)
    with pytest.raises(ValueError, match=r"eval split .* has 300 bytes, too short for length=300"):
        sample_batch(task, jax.random.key(0), 2, 300, split="eval")
    with pytest.raises(ValueError, match=r"eval_fraction must be in \[0.0, 0.9\]"):
        make_task("lm_text", 256, path=text_file, eval_fraction=0.95)
    with pytest.raises(ValueError, match="split must be one of train, eval"):
        task.operands("test")


# ------------------------------------------------------------------------------------------
# lm_text: the held-out evaluation split
# ------------------------------------------------------------------------------------------


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
    from rope_lab.evaluate import evaluate_model
    from rope_lab.ntk_tracking import draw_probes
    from rope_lab.train import make_task_from, train
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
        batch = sample_batch(task, jax.random.key(1), 16, 64, split=split)
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
        return task.sample(key, 2, 8, split="eval").tokens

    first = np.asarray(first_draw(jax.random.key(0)))
    (cached,) = task.operands("eval")
    assert not isinstance(cached, jax.core.Tracer)
    again = sample_batch(task, jax.random.key(0), 2, 8, split="eval")
    np.testing.assert_array_equal(np.asarray(again.tokens), first)
    start, stop = text_split_bounds(1024, 0.1)["eval"]
    np.testing.assert_array_equal(
        np.asarray(cached), np.frombuffer(path.read_bytes(), np.uint8)[start:stop]
    )

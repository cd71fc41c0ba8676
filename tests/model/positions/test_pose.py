"""PoSE positions (Zhu et al. 2024, 3.2): chunk i of a length-L sequence has ids
st_i + u_i, ..., st_i + u_i + l_i - 1 with st_i = l_0 + ... + l_{i-1}, u_0 = 0 and
u_i ~ U{u_{i-1}, ..., L_t - L}; the N - 1 cuts are distinct draws from {1, ..., L-1}.

Expected distributions come from `numpy_pose`, an independent NumPy transcription of that
sampling; the training tests read which rows of a learned table moved, so they see the exact
positions the step fed to the model.
"""

import functools

import jax
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model.positions.modules.pose import (
    chunk_starts,
    pose_batch_positions,
    pose_positions,
    skip_biases,
)
from rope_lab.runtime.xla_options import FEW_CALLS
from rope_lab.trial.ensemble import train_ensemble
from rope_lab.trial.run import run_trial
from rope_lab.trial.train import make_model, train
from tests.helpers import tiny_trial

DRAWS = 4000


def numpy_pose(length: int, target: int, chunks: int, rng: np.random.Generator):
    """One PoSE draw written from the paper's equations (3)-(4): ids (L,), chunk starts st (N,)
    and skips u (N,)."""
    cuts = np.sort(rng.choice(np.arange(1, length), chunks - 1, replace=False))
    starts = [0, *cuts.tolist()]
    bounds = [*starts, length]
    ids, u = [], [0]
    for i in range(chunks):
        if i > 0:
            u.append(int(rng.integers(u[-1], target - length + 1)))  # U{u_{i-1}, ..., L_t - L}
        ids += [bounds[i] + u[i] + j for j in range(bounds[i + 1] - bounds[i])]
    return np.asarray(ids), np.asarray(starts), np.asarray(u)


@functools.cache
def _sampler(length: int, target: int, chunks: int):
    def one(key):
        length_key, skip_key = jax.random.split(key)
        parts = (
            pose_positions(length, target, chunks, key=key),
            chunk_starts(length, chunks, key=length_key),
            skip_biases(chunks, target - length, key=skip_key),
        )
        return parts if chunks > 1 else parts[:1]

    return jax.jit(jax.vmap(one), compiler_options=FEW_CALLS)


def draws(length: int, target: int, chunks: int, n: int = DRAWS, seed: int = 0) -> list:
    """n independent draws, one compiled program per (length, target, chunks, n): the ids
    (n, L) and, for chunks > 1, the draws' own chunk starts (n, N) and skips u (n, N), from the
    same keys as `pose_positions` splits."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return [np.asarray(x) for x in _sampler(length, target, chunks)(keys)]


def pose_trial(length: int = 10, target: int | None = 40, table: int = 60, **overrides):
    """A tiny learned-table trial (table rows beyond `target` too), trained 2 steps with PoSE."""
    cfg = tiny_trial("learned", length=length, steps=2, pose_target_length=target)
    cfg = replace(cfg, **{"model.position.max_length": table, "ntk.enabled": False, **overrides})
    return validate(cfg)


def moved_rows(cfg, result) -> set[int]:
    """Rows of the learned table that training changed."""
    before = np.asarray(make_model(cfg).position.table)
    after = np.asarray(result.model.position.table)
    return set(np.flatnonzero(np.any(before != after, axis=1)).tolist())


def fed_positions(cfg, steps: int) -> set[int]:
    """Every id of the train loop's PoSE draws over `steps` steps, rebuilt from its key
    schedule: step s draws positions from split(fold_in(fold_in(PRNGKey(seed), 1), s))[1]."""
    data_key = jax.random.fold_in(jax.random.PRNGKey(cfg.train.seed), 1)
    draw = jax.jit(pose_batch_positions, static_argnums=(0, 1, 2))
    seen: set[int] = set()
    for s in range(steps):
        _, pos_key = jax.random.split(jax.random.fold_in(data_key, s))
        ids = draw(cfg, cfg.train.batch_size, cfg.train.length, key=pos_key)
        seen |= set(np.asarray(ids).ravel().tolist())
    return seen


@settings(max_examples=6)  # each example compiles one program for 64 draws
@given(
    length=st.integers(1, 40),
    extra=st.integers(0, 60),
    chunk_frac=st.floats(0, 1),
    seed=st.integers(0, 2**31 - 1),
)
@example(length=1, extra=5, chunk_frac=1.0, seed=0)
@example(length=9, extra=0, chunk_frac=0.5, seed=0)  # no room to skip
@example(length=6, extra=30, chunk_frac=1.0, seed=1)  # every token its own chunk
def test_positions_are_contiguous_chunks_shifted_by_non_decreasing_skips(
    length, extra, chunk_frac, seed
):
    target = length + extra
    chunks = 1 + round(chunk_frac * (length - 1))
    pos, *parts = draws(length, target, chunks, n=64, seed=seed)
    assert pos.dtype == np.int32 and pos.shape == (64, length)
    np.testing.assert_array_equal(pos[:, 0], 0)  # u_0 = 0
    assert np.all(np.diff(pos, axis=1) >= 1) and pos.min() >= 0 and pos.max() < target
    if chunks == 1 or extra == 0:
        np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(length), pos.shape))
        return
    # Each draw's own chunks: ids step by exactly 1 inside each, only its chunks - 1 cuts may
    # jump, and chunk i is shifted by its skip u_i in [u_{i-1}, target - length].
    starts, u = parts
    assert starts.shape == u.shape == (64, chunks)
    assert np.all(starts[:, 0] == 0) and np.all(np.diff(starts, axis=1) >= 1)
    assert np.all(starts[:, -1] < length)
    assert np.all(u[:, 0] == 0) and np.all(np.diff(u, axis=1) >= 0) and u.max() <= extra
    for ids, st_, u_ in zip(pos, starts, u, strict=True):
        chunk_of = np.searchsorted(st_, np.arange(length), side="right") - 1
        np.testing.assert_array_equal(ids, np.arange(length) + u_[chunk_of])
        jumps = np.flatnonzero(np.diff(ids) != 1) + 1
        assert set(jumps.tolist()) <= set(st_[1:].tolist())


@given(length=st.integers(1, 50), chunks=st.integers(1, 50), seed=st.integers(0, 2**31 - 1))
def test_one_chunk_or_no_room_gives_the_contiguous_ids(length, chunks, seed):
    key = jax.random.PRNGKey(seed)
    expected = np.arange(length)
    np.testing.assert_array_equal(pose_positions(length, length + 7, 1, key=key), expected)
    chunks = min(chunks, length)
    np.testing.assert_array_equal(pose_positions(length, length, chunks, key=key), expected)


def test_rejects_out_of_range_arguments(key):
    with pytest.raises(ValueError, match="chunks"):
        pose_positions(8, 16, 9, key=key)
    with pytest.raises(ValueError, match="chunks"):
        pose_positions(8, 16, 0, key=key)
    with pytest.raises(ValueError, match="target_length"):
        pose_positions(8, 7, 2, key=key)
    with pytest.raises(ValueError, match="pose_target_length"):
        pose_batch_positions(tiny_trial(), 2, 16, key=key)


def test_two_chunks_spread_the_last_position_uniformly_over_the_target_window():
    """chunks=2: the last id is L - 1 + u_1, u_1 ~ U{0, ..., L_t - L}: uniform over
    [L - 1, L_t - 1], both ends reached (chi-square against uniform, fixed seed)."""
    length, target = 16, 64
    last = draws(length, target, 2)[0][:, -1]
    assert last.min() == length - 1 and last.max() == target - 1
    counts = np.bincount(last - (length - 1))
    assert len(counts) == target - length + 1
    chi2 = stats.chisquare(counts)
    assert chi2.pvalue > 1e-3, chi2


@pytest.mark.parametrize(("length", "target", "chunks"), [(16, 64, 2), (10, 25, 4)])
def test_distribution_matches_the_numpy_transcription_of_the_paper(length, target, chunks):
    """Mean id at every index, mean chunk starts (l_0 first) and mean skips (u_1 first), JAX
    draws vs the NumPy transcription, each within 5 combined standard errors; u_1 ~ U{0..L_t-L}
    also has that law's mean and variance."""
    pos, starts, u = (x.astype(np.float64) for x in draws(length, target, chunks, seed=1))
    rng = np.random.default_rng(2)
    ref = [
        np.stack(x).astype(float)
        for x in zip(*(numpy_pose(length, target, chunks, rng) for _ in range(DRAWS)), strict=True)
    ]

    def close(ours, theirs):
        se = np.sqrt(ours.var(axis=0) / DRAWS + theirs.var(axis=0) / DRAWS)
        gap = np.abs(ours.mean(axis=0) - theirs.mean(axis=0))
        assert np.all(gap <= 5 * se + 1e-12), gap / np.maximum(se, 1e-12)

    close(pos, ref[0])
    close(starts, ref[1])  # st_1 = l_0, the first chunk's length
    close(u, ref[2])  # u_1 first
    m = target - length
    variance = ((m + 1) ** 2 - 1) / 12
    assert abs(u[:, 1].mean() - m / 2) <= 5 * np.sqrt(variance / DRAWS)
    assert abs(u[:, 1].var() / variance - 1) < 0.1
    assert not np.allclose(pos.mean(axis=0), np.arange(length))  # the skips do move the ids


def test_batch_draws_are_independent_per_sequence_and_jit(key):
    cfg = pose_trial()
    draw = jax.jit(pose_batch_positions, static_argnums=(0, 1, 2))
    ids = np.asarray(draw(cfg, 64, 10, key=key))
    assert ids.shape == (64, 10)
    assert len({tuple(row) for row in ids.tolist()}) > 32
    single = pose_positions(10, 40, cfg.train.pose_chunks, key=jax.random.split(key, 64)[5])
    np.testing.assert_array_equal(ids[5], single)


def test_config_validation_of_the_pose_fields():
    with pytest.raises(ConfigError, match="pose_target_length"):
        pose_trial(target=9)
    with pytest.raises(ConfigError, match="pose_chunks"):
        pose_trial(**{"train.pose_chunks": 11})
    with pytest.raises(ConfigError, match="randomized"):
        pose_trial(**{"model.position.randomized": True, "model.position.random_max_length": 32})
    assert replace(pose_trial(), **{"model.position.max_length": None}).max_length == 40


def test_train_step_feeds_exactly_the_pose_positions():
    """Two steps on a 60-row learned table at L = 10 with PoSE (L_t = 40): the rows that move
    are exactly the ids the step drew (rows no sequence reaches keep their init under Adam
    without decay), some beyond L and none at or beyond L_t."""
    cfg = pose_trial()
    moved = moved_rows(cfg, train(cfg))
    assert moved == fed_positions(cfg, 2)
    assert 10 <= max(moved) < 40


@pytest.mark.slow  # three short training runs
def test_only_pose_training_at_the_trial_length_moves_rows_beyond_it():
    """Without PoSE only rows 0..L-1 move; a length override (fine-tuning at a target length)
    trains on 0..L'-1 under PoSE too, unless `pose=True` asks for it."""
    plain = pose_trial(target=None)
    assert moved_rows(plain, train(plain)) == set(range(10))
    cfg = pose_trial()
    assert moved_rows(cfg, train(cfg, length=20)) == set(range(20))
    assert max(moved_rows(cfg, train(cfg, length=10, pose=True))) >= 10


@pytest.mark.slow  # a short training run
def test_seed_ensemble_trains_with_pose():
    cfg = pose_trial()
    (member,) = train_ensemble(cfg, [cfg.train.seed])
    assert moved_rows(cfg, member) == fed_positions(cfg, 2)


@pytest.mark.slow  # train, evaluate and store a trial: about 25 s on a loaded 2-core CPU
def test_trial_with_pose_runs_end_to_end(tmp_path):
    cfg = pose_trial(**{"train.steps": 4})
    outcome = run_trial(cfg, tmp_path)
    assert outcome.status == "done" and len(outcome.history) > 0
    assert {r["length"] for r in outcome.eval_rows} == {5, 10, 20}
    moved = moved_rows(cfg, outcome)
    assert moved == fed_positions(cfg, 4) and max(moved) >= 10

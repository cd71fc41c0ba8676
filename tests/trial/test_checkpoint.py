"""Tests for rope_lab.trial.checkpoint."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rope_lab.trial.checkpoint import TrialCheckpointer, load_model, save_model


def _mlp(seed: int = 0) -> eqx.nn.MLP:
    return eqx.nn.MLP(4, 2, width_size=8, depth=2, key=jax.random.key(seed))


def _assert_trees_equal(a: Any, b: Any) -> None:
    a_arr, a_static = eqx.partition(a, eqx.is_array)
    b_arr, b_static = eqx.partition(b, eqx.is_array)
    assert jax.tree_util.tree_structure(a_arr) == jax.tree_util.tree_structure(b_arr)
    leaves = zip(jax.tree_util.tree_leaves(a_arr), jax.tree_util.tree_leaves(b_arr), strict=True)
    for x, y in leaves:
        assert x.dtype == y.dtype
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert jax.tree_util.tree_structure(a_static) == jax.tree_util.tree_structure(b_static)


OPTIMIZER = optax.adamw(1e-2, weight_decay=0.1)


@eqx.filter_jit
def _train_step(model, opt_state, x, y):
    def loss_fn(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def _batch(key: jax.Array, step: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(jax.random.fold_in(key, step))
    return jax.random.normal(kx, (16, 4)), jax.random.normal(ky, (16, 2))


def _init(seed: int = 0):
    model = _mlp(seed)
    return model, OPTIMIZER.init(eqx.filter(model, eqx.is_array))


def _train(model, opt_state, start: int, stop: int, ckpt: TrialCheckpointer | None = None):
    data_key = jax.random.key(42)
    for i in range(start, stop):
        model, opt_state, _ = _train_step(model, opt_state, *_batch(data_key, i))
        if ckpt is not None:
            ckpt.save(i + 1, model, opt_state, {"next_batch": i + 1})
    return model, opt_state


@functools.cache
def _trained_state(n_steps: int = 3):
    return OPTIMIZER, *_train(*_init(), 0, n_steps)


def test_latest_step_none_on_empty_dir(tmp_path: Path) -> None:
    with TrialCheckpointer(tmp_path / "ckpt", every=1) as ckpt:
        assert ckpt.latest_step() is None
        with pytest.raises(FileNotFoundError):
            ckpt.restore(_mlp(), None)


def test_roundtrip_bit_exact(tmp_path: Path) -> None:
    optimizer, model, opt_state = _trained_state()
    extra = {"stream_position": 1234, "epoch": 0, "note": "x"}
    with TrialCheckpointer(tmp_path, every=5) as ckpt:
        assert ckpt.save(5, model, opt_state, extra)
    # Skeletons: a fresh model and optimizer state with different values.
    model_like = _mlp(seed=99)
    opt_like = optimizer.init(eqx.filter(model_like, eqx.is_array))
    with TrialCheckpointer(tmp_path, every=5) as ckpt:
        assert ckpt.latest_step() == 5
        model2, opt2, step, extra2 = ckpt.restore(model_like, opt_like)
    assert step == 5
    assert extra2 == extra
    _assert_trees_equal(model2, model)
    _assert_trees_equal(opt2, opt_state)
    # The count leaf and the EmptyState parts survive the round trip.
    assert int(opt2[0].count) == 3
    assert model2.activation is model.activation


def test_restore_into_abstract_skeletons(tmp_path: Path) -> None:
    optimizer, model, opt_state = _trained_state()
    with TrialCheckpointer(tmp_path, every=1) as ckpt:
        ckpt.save(3, model, opt_state)
        model_like = eqx.filter_eval_shape(_mlp)
        opt_like = eqx.filter_eval_shape(lambda: optimizer.init(eqx.filter(_mlp(), eqx.is_array)))
        assert not any(eqx.is_array(x) for x in jax.tree_util.tree_leaves((model_like, opt_like)))
        model2, opt2, step, extra = ckpt.restore(model_like, opt_like)
    assert step == 3 and extra == {}
    _assert_trees_equal(model2, model)
    _assert_trees_equal(opt2, opt_state)


def test_optimizer_without_array_state_and_key_leaves(tmp_path: Path) -> None:
    optimizer = optax.sgd(0.1)  # state holds no arrays at all
    state = {"w": jnp.arange(3.0), "key": jax.random.key(7), "raw": np.ones(2, np.int32)}
    opt_state = optimizer.init(state["w"])
    with TrialCheckpointer(tmp_path, every=1) as ckpt:
        ckpt.save(1, state, opt_state, {"a": [1, 2]})
        like = {"w": jnp.zeros(3), "key": jax.random.key(0), "raw": np.zeros(2, np.int32)}
        restored, opt2, _, extra = ckpt.restore(like, optimizer.init(like["w"]))
    assert extra == {"a": [1, 2]}
    assert np.array_equal(restored["w"], state["w"])
    assert np.array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(state["key"]))
    assert isinstance(restored["raw"], np.ndarray)
    assert np.array_equal(restored["raw"], state["raw"])
    assert jax.tree_util.tree_structure(opt2) == jax.tree_util.tree_structure(opt_state)


def test_mismatched_skeleton_raises(tmp_path: Path) -> None:
    model, opt_state = _init()
    optimizer = OPTIMIZER
    with TrialCheckpointer(tmp_path, every=1) as ckpt:
        ckpt.save(1, model, opt_state)
        other = eqx.nn.MLP(4, 2, width_size=16, depth=2, key=jax.random.key(0))
        with pytest.raises(ValueError, match="skeleton does not match"):
            ckpt.restore(other, optimizer.init(eqx.filter(other, eqx.is_array)))


def test_every_force_and_max_to_keep(tmp_path: Path) -> None:
    _, model, opt_state = _trained_state()
    with TrialCheckpointer(tmp_path, every=3, max_to_keep=2) as ckpt:
        written = [s for s in range(1, 11) if ckpt.save(s, model, opt_state)]
        assert written == [3, 6, 9]
        assert ckpt.all_steps() == [6, 9]
        assert ckpt.save(10, model, opt_state, force=True)
        assert ckpt.all_steps() == [9, 10]
        assert not ckpt.save(10, model, opt_state, force=True)  # already there
        assert ckpt.latest_step() == 10
    step_dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert step_dirs == ["10", "9"]
    with TrialCheckpointer(tmp_path, every=3, max_to_keep=2) as ckpt:
        assert ckpt.all_steps() == [9, 10]
        with pytest.raises(FileNotFoundError):
            ckpt.restore(model, opt_state, step=3)


def test_resume_equivalence(tmp_path: Path) -> None:
    n_steps, every, crash_at = 10, 3, 7
    ref_model, ref_opt = _train(*_init(), 0, n_steps)

    ckpt = TrialCheckpointer(tmp_path / "ckpt", every=every)
    model, opt_state = _train(*_init(), 0, crash_at, ckpt)
    del model, opt_state, ckpt  # "crash": nothing but the files survives

    with TrialCheckpointer(tmp_path / "ckpt", every=every) as ckpt:
        assert ckpt.latest_step() == 6
        model, opt_state, step, extra = ckpt.restore(*_init(seed=1))
        assert step == 6 and extra == {"next_batch": 6}
        model, opt_state = _train(model, opt_state, extra["next_batch"], n_steps, ckpt)
        assert ckpt.latest_step() == 9

    _assert_trees_equal(model, ref_model)
    _assert_trees_equal(opt_state, ref_opt)
    assert int(opt_state[0].count) == n_steps


def test_save_load_model_atomic(tmp_path: Path) -> None:
    _, model, _ = _trained_state()
    path = tmp_path / "final" / "model.eqx"
    assert save_model(path, model) == path
    save_model(path, model)  # overwrite in place
    assert os.listdir(path.parent) == ["model.eqx"]
    loaded = load_model(path, _mlp(seed=5))
    _assert_trees_equal(loaded, model)


_KILL_SCRIPT = """
import os, signal, sys
import equinox as eqx, jax, jax.numpy as jnp, optax
from rope_lab.trial.checkpoint import TrialCheckpointer

model = eqx.nn.MLP(4, 2, width_size=8, depth=2, key=jax.random.key(3))
model = jax.tree_util.tree_map(lambda x: x + 1 if eqx.is_array(x) else x, model)
opt_state = optax.adam(1e-3).init(eqx.filter(model, eqx.is_array))
ckpt = TrialCheckpointer(sys.argv[1], every=3)
assert ckpt.save(3, model, opt_state, {"pos": 3})
eqx.tree_serialise_leaves(sys.argv[2], model)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_restore_after_process_killed_right_after_save(tmp_path: Path) -> None:
    ref = tmp_path / "ref.eqx"
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, str(tmp_path / "ckpt"), str(ref)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    model_like = _mlp()
    expected = eqx.tree_deserialise_leaves(ref, model_like)
    opt_like = optax.adam(1e-3).init(eqx.filter(model_like, eqx.is_array))
    with TrialCheckpointer(tmp_path / "ckpt", every=3) as ckpt:
        assert ckpt.latest_step() == 3
        model, _, step, extra = ckpt.restore(model_like, opt_like)
    assert step == 3 and extra == {"pos": 3}
    _assert_trees_equal(model, expected)


def test_async_save_committed_on_close(tmp_path: Path) -> None:
    optimizer, model, opt_state = _trained_state()
    with TrialCheckpointer(tmp_path, every=2, async_save=True) as ckpt:
        assert ckpt.save(2, model, opt_state)
        assert ckpt.save(4, model, opt_state)
    with TrialCheckpointer(tmp_path, every=2) as ckpt:
        assert ckpt.all_steps() == [2, 4]
        restored, _, _, _ = ckpt.restore(_mlp(1), optimizer.init(eqx.filter(_mlp(1), eqx.is_array)))
    _assert_trees_equal(restored, model)

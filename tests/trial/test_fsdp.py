"""Sharded parameters (`train.shard_params`): on 4 devices the parameters and optimiser state
are split over the data axis, each device holds about a quarter of them, training gives the
1-device losses and parameters, and a checkpoint written on N devices restores on M.

The 4-device runs need `XLA_FLAGS=--xla_force_host_platform_device_count=4` before JAX is
imported, so they run in a child Python process that prints its findings as JSON.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    from rope_lab.config import replace
    from rope_lab.trial import parallel
    from rope_lab.trial.checkpoint import TrialCheckpointer
    from rope_lab.hooks import Hook
    from rope_lab.trial.optimizer import make_optimizer
    from rope_lab.trial.train import make_model, train, trainable
    from tests.helpers import tiny_trial

    assert jax.local_device_count() == 4, jax.devices()
    out = {}
    mesh = parallel.data_mesh(4)
    shapes = [(8, 16), (4, 4), (6,), (), (3, 5), (2, 8)]
    out["axes"] = [
        list(parallel.leaf_sharding(jnp.zeros(s), mesh).spec) for s in shapes
    ]

    cfg = replace(tiny_trial("rope", width=32, depth=2, steps=12), **{"train.log_every": 1})
    runs = {}
    for name, devices, sharded in (("one", 1, False), ("replicated", 4, False),
                                   ("sharded", 4, True)):
        seen = {}

        def look(state, seen=seen):
            params = eqx.filter(state.model, eqx.is_array)
            seen["bytes"] = parallel.bytes_per_device((params, state.opt_state))
            seen["spec"] = str(state.model.embedding.sharding.spec)

        def first(state, seen=seen):
            seen["start_spec"] = str(state.model.embedding.sharding.spec)

        changes = {"train.devices": devices, "train.shard_params": sharded}
        hooks = [Hook(every=0, fn=look), Hook(every=0, fn=first, at_end=False, at_start=True)]
        res = train(replace(cfg, **changes), hooks=hooks)
        leaves = jax.tree.leaves(eqx.filter(res.model, eqx.is_array))
        runs[name] = {
            "loss": [r["loss"] for r in res.history],
            "params": [np.asarray(x).ravel().tolist() for x in leaves],
            "max_bytes": max(seen["bytes"].values()),
            "devices": len(seen["bytes"]),
            "spec": seen["spec"],
            "start_spec": seen["start_spec"],
        }
        if name == "sharded":
            sharded_model, sharded_opt = res.model, res.opt_state
    out["runs"] = runs

    # a checkpoint written from 4 sharded devices restores on 1, and one from 1 on 4
    like_one = make_model(cfg)
    opt = make_optimizer(cfg.train, like_one)
    opt_like_one = opt.init(eqx.partition(like_one, trainable(like_one))[0])
    model_four = parallel.shard(sharded_model, mesh)
    with TrialCheckpointer(sys.argv[1] + "/four", every=1) as ckpt:
        ckpt.save(3, model_four, sharded_opt)
        model_one, opt_one, _, _ = ckpt.restore(like_one, opt_like_one, 3)
    like_four = parallel.shard(like_one, mesh)
    opt_like_four = parallel.shard(opt_like_one, mesh)
    with TrialCheckpointer(sys.argv[1] + "/one", every=1) as ckpt:
        ckpt.save(3, model_one, opt_one)
        model_back, opt_back, _, _ = ckpt.restore(like_four, opt_like_four, 3)

    def arrays(tree):
        return jax.tree.leaves(eqx.filter(tree, eqx.is_array))

    def equal(a, b):
        return all(np.array_equal(x, y) for x, y in zip(arrays(a), arrays(b), strict=True))

    out["restore"] = {
        "four_to_one_equal": equal((model_four, sharded_opt), (model_one, opt_one)),
        "one_devices": max(len(x.sharding.device_set) for x in arrays((model_one, opt_one))),
        "one_to_four_equal": equal((model_four, sharded_opt), (model_back, opt_back)),
        "four_spec": str(model_back.embedding.sharding.spec),
        "four_opt_sharded": any("data" in str(x.sharding.spec) for x in arrays(opt_back)),
    }
    print("RESULT" + json.dumps(out))
    """
)


@pytest.mark.slow  # ~25 s on 2 cores; its split axes are pinned by default below, without training
def test_sharded_parameters_train_as_one_device_with_a_quarter_of_the_memory(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    out = json.loads(line.removeprefix("RESULT"))

    # the largest axis the 4 devices divide, the first among equals; else whole
    assert out["axes"] == [[None, "data"], ["data", None], [], [], [], [None, "data"]]

    runs = out["runs"]
    one, replicated, sharded = runs["one"], runs["replicated"], runs["sharded"]
    assert len(one["loss"]) == len(sharded["loss"]) == 12
    assert one["loss"][-1] < one["loss"][0]  # it trained
    np.testing.assert_allclose(sharded["loss"], one["loss"], rtol=1e-4)
    np.testing.assert_allclose(replicated["loss"], one["loss"], rtol=1e-4)
    for p_sharded, p_one in zip(sharded["params"], one["params"], strict=True):
        np.testing.assert_allclose(p_sharded, p_one, rtol=1e-3, atol=1e-5)
    assert sharded["devices"] == replicated["devices"] == 4
    assert "data" in sharded["spec"] and "data" not in replicated["spec"]
    assert "data" in sharded["start_spec"]  # placed sharded from the start, not after a step
    # replicated: every device holds everything; sharded: about a quarter (odd-sized leaves,
    # the optimiser's step counts, stay whole)
    assert replicated["max_bytes"] == one["max_bytes"]
    assert sharded["max_bytes"] <= 0.3 * replicated["max_bytes"]

    restore = out["restore"]
    assert restore["four_to_one_equal"] and restore["one_devices"] == 1
    assert restore["one_to_four_equal"] and "data" in restore["four_spec"]
    assert restore["four_opt_sharded"]


SPLITS_CHILD = textwrap.dedent(
    """
    import itertools, json
    import jax.numpy as jnp
    from rope_lab.trial import parallel

    assert parallel.jax.local_device_count() == 4
    shapes = [(), (1,), (3,), (4,), (6,), (8, 6), (6, 8), (12, 12), (3, 5), (2, 9), (5, 4, 2)]
    out = []
    for n, shape in itertools.product((1, 2, 3, 4), shapes):
        mesh = parallel.data_mesh(n)
        placed = parallel.shard({"x": jnp.zeros(shape, jnp.float32)}, mesh)["x"]
        out.append({
            "n": n,
            "shape": list(shape),
            "spec": [a for a in parallel.leaf_sharding(placed, mesh).spec],
            "shards": sorted({tuple(s.data.shape) for s in placed.addressable_shards}),
            "devices": len(placed.sharding.device_set),
        })
    print("RESULT" + json.dumps(out))
    """
)


def _split_axis(shape: tuple[int, ...], n: int) -> int | None:
    """Brute force: the axis FSDP splits over n devices (the largest that n divides, the first
    among equals), None when it keeps the array whole."""
    best = None
    for i, size in enumerate(shape):
        if n > 1 and size >= n and size % n == 0 and (best is None or size > shape[best]):
            best = i
    return best


def test_sharding_splits_only_an_axis_the_device_count_divides():
    """The law of the slow test's axes, on 1-4 of 4 forced CPU devices without training: each
    array is split along the axis `_split_axis` picks (each device holding 1/n of it), or held
    whole on every device when no axis divides."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SPLITS_CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    cases = json.loads(line.removeprefix("RESULT"))
    assert len(cases) == 44
    for case in cases:
        n, shape = case["n"], tuple(case["shape"])
        axis = _split_axis(shape, n)
        spec = [None] * len(shape)
        local = list(shape)
        if axis is not None:
            spec[axis] = "data"
            local[axis] //= n
        got = case["spec"] + [None] * (len(shape) - len(case["spec"]))  # unnamed trailing axes
        assert got == spec, case
        assert case["shards"] == [local], case
        assert case["devices"] == n, case

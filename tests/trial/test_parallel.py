"""Data-parallel training: 2 devices give the 1-device loss curve, with the batch really split.

The 2-device runs need `XLA_FLAGS=--xla_force_host_platform_device_count=2` before JAX is
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

from rope_lab.config import ConfigError, replace, validate
from rope_lab.trial.parallel import data_mesh, resolve_devices
from rope_lab.trial.train import train
from tests.helpers import tiny_trial

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import equinox as eqx
    import jax
    from rope_lab.trial import parallel
    from rope_lab.config import replace
    from rope_lab.hooks import Hook
    from rope_lab.trial.optimizer import make_optimizer
    from rope_lab.trial.train import (
        TraceGuard, make_model, make_task_from, make_train_step, train, trainable,
    )
    from tests.helpers import tiny_trial

    assert jax.local_device_count() == 2, jax.devices()
    # The step compiled by train() is compiled again below for its HLO: a disk cache hit.
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    cfg = replace(tiny_trial("rope", width=32, depth=2, steps=20), **{"train.log_every": 1})
    runs = {}
    assert parallel.resolve_devices(None, cfg.train.batch_size) == 2  # None: all devices
    for devices in (2, 1):
        start = time.perf_counter()
        seen = []  # the model a hook sees during training: replicated over the devices
        hook = Hook(every=0, fn=lambda state: seen.append(state.model.embedding.sharding))
        res = train(replace(cfg, **{"train.devices": devices}), hooks=[hook])
        emb = seen[-1]
        assert len(res.model.embedding.sharding.device_set) == 1  # returned on one device
        runs[str(devices)] = {
            "loss": [r["loss"] for r in res.history],
            "grad_norm": [r["grad_norm"] for r in res.history],
            "traces": res.traces,
            "param_devices": len(emb.device_set),
            "replicated": emb.is_fully_replicated,
            "seconds": time.perf_counter() - start,
        }

    # The compiled 2-device step: activations (B, L, D) are (B/2, L, D) per device and the
    # gradients are all-reduced.
    mesh = parallel.data_mesh(2)
    task, model = make_task_from(cfg), make_model(cfg)
    opt = make_optimizer(cfg.train, model)
    params, static = eqx.partition(model, trainable(model))
    params, static = parallel.replicate((params, static), mesh)
    opt_state = parallel.replicate(opt.init(params), mesh)
    step = make_train_step(cfg, task, opt, length=16, guard=TraceGuard("step"), mesh=mesh)
    args = (static, params, opt_state, jax.random.PRNGKey(0), parallel.replicate((), mesh))
    start = time.perf_counter()
    hlo = step.lower(*args).lowered.compile().as_text()
    runs["hlo_seconds"] = time.perf_counter() - start
    b, L, d = cfg.train.batch_size, cfg.train.length, cfg.model.width
    runs["hlo"] = {
        "all_reduce": "all-reduce" in hlo,
        "half_batch": f"f32[{b // 2},{L},{d}]" in hlo,
        "full_batch": f"f32[{b},{L},{d}]" in hlo,
    }
    print("RESULT" + json.dumps(runs))
    """
)


@pytest.mark.slow  # ~24 s on 2 cores
def test_two_devices_match_one_device_and_split_the_batch(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "jax_cache")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    runs = json.loads(line.removeprefix("RESULT"))

    one, two = runs["1"], runs["2"]
    assert len(one["loss"]) == len(two["loss"]) == 20
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4)
    np.testing.assert_allclose(two["grad_norm"], one["grad_norm"], rtol=1e-3)
    assert one["loss"][-1] < one["loss"][0]  # it trained
    assert one["traces"] == two["traces"] == 1
    assert two["param_devices"] == 2 and two["replicated"]
    assert one["param_devices"] == 1
    assert runs["hlo"] == {"all_reduce": True, "half_batch": True, "full_batch": False}


def test_devices_must_divide_the_batch(monkeypatch):
    cfg = tiny_trial("rope")  # batch_size 8
    with pytest.raises(
        ConfigError, match=r"train\.batch_size: 8 is not divisible by train\.devices=3"
    ):
        validate(replace(cfg, **{"train.devices": 3}))
    with pytest.raises(ConfigError, match=r"train\.devices: must be > 0"):
        validate(replace(cfg, **{"train.devices": 0}))
    # devices=None (all local devices) is only known at run time.
    monkeypatch.setattr("jax.local_device_count", lambda *a, **k: 4)
    with pytest.raises(ValueError, match=r"train\.batch_size: 6 is not divisible by the 4 devices"):
        resolve_devices(None, 6)
    assert resolve_devices(None, 8) == 4
    assert resolve_devices(2, 6) == 2


def test_more_devices_than_the_host_has_is_an_error():
    import jax

    n = jax.local_device_count()
    with pytest.raises(ValueError, match=rf"train\.devices: {n + 1} requested but this host has"):
        train(replace(tiny_trial("rope", steps=1), **{"train.devices": n + 1}))
    assert data_mesh().devices.size == n
    assert data_mesh().axis_names == ("data",)

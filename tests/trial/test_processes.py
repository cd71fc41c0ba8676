"""One trial over several JAX processes on this machine (`train.processes`).

The probe runs two localhost JAX processes that sum across processes on CPU (gloo). The slow
tests train a tiny trial as two processes: the losses equal the one-process run to float
rounding, a checkpoint the two wrote restores in this one process, and a worker that dies ends
the trial as failed with its reason.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rope_lab.config import ConfigError, replace, to_dict, validate
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.trial import processes
from rope_lab.trial.packing import unpackable
from rope_lab.trial.pipeline import run_train_stage, run_trial_stages
from tests.helpers import tiny_trial

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from rope_lab.trial.processes import join

    k = int(sys.argv[2])
    join(sys.argv[1], 2, k, local_devices=2)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("d")), np.full((2,), 10.0**k, np.float32)
    )
    total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))(x)
    print("RESULT", jax.process_count(), jax.device_count(), float(total), flush=True)
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "ROPE_LAB_COMPILE_CACHE": "0"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cfg(**changes: object):
    base = tiny_trial("rope", steps=12, checkpoint_every=6)
    return replace(base, **{"ntk.enabled": False, "train.log_every": 1, **changes})


def test_two_processes_sum_across_processes_on_cpu(tmp_path: Path) -> None:
    """Process k contributes 10**k on each of its 2 devices: the sum over the 4 devices of the
    two processes is 2 + 20 = 22 in both."""
    address = f"127.0.0.1:{_free_port()}"
    argv = [sys.executable, "-c", PROBE, address]
    procs = [
        subprocess.Popen([*argv, str(k)], env=_env(), stdout=subprocess.PIPE, text=True)
        for k in range(2)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    results = [line for out in outs for line in out.splitlines() if line.startswith("RESULT")]
    assert results == ["RESULT 2 4 22.0"] * 2


def test_processes_config_errors() -> None:
    """Bad `train.processes` settings are named before any work."""
    with pytest.raises(ConfigError, match=r"^train\.processes: must be > 0, got 0$"):
        validate(_cfg(**{"train.processes": 0}))
    with pytest.raises(
        ConfigError,
        match=r"^train\.batch_size: 8 is not divisible by the 3 devices of "
        r"train\.processes=3 x train\.devices=1$",
    ):
        validate(_cfg(**{"train.processes": 3}))
    validate(_cfg(**{"train.processes": 2, "ntk.enabled": True}))  # NTK tracked by process 0
    assert validate(_cfg(**{"train.processes": 2})).trial_id == validate(_cfg()).trial_id
    assert unpackable(_cfg(**{"train.processes": 2})) == (
        "train.processes 2 (a pack trains in one process)"
    )


def test_launch_refuses_busy_port_and_too_many_processes(monkeypatch) -> None:
    """`check_launch`: more processes than CPU cores, a coordinator port in use or not a port."""
    cores = os.cpu_count() or 1
    with pytest.raises(
        ConfigError, match=rf"^train\.processes: {cores + 1} processes but this machine has "
    ):
        processes.check_launch(_cfg(**{"train.processes": cores + 1, "train.batch_size": 8}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv(processes.PORT_ENV, str(port))
        in_use = rf"^ROPE_LAB_COORDINATOR_PORT: port {port} on 127\.0\.0\.1 is in use$"
        with pytest.raises(ConfigError, match=in_use):
            processes.check_launch(_cfg(**{"train.processes": 2}))
    monkeypatch.setenv(processes.PORT_ENV, "http")
    with pytest.raises(ConfigError, match=r"^ROPE_LAB_COORDINATOR_PORT: not a port number"):
        processes.coordinator_port()
    monkeypatch.delenv(processes.PORT_ENV)
    processes.check_launch(_cfg())  # one process: nothing to check


def test_cli_names_a_launch_problem_before_training(tmp_path: Path, capsys) -> None:
    """`rope-lab train` with more processes than cores: one line, exit 1, nothing written."""
    from rope_lab.cli import main

    cores = os.cpu_count() or 1
    cfg = _cfg(**{"train.processes": cores + 1, "train.batch_size": 8 * (cores + 1)})
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    assert main(["train", str(path), "--out", str(tmp_path / "out")]) == 1
    err = f"rope-lab: error: train.processes: {cores + 1} processes but this machine has {cores}"
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", err + " CPU cores\n")  # before the trial's header line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_processes_train_as_one_and_checkpoint_restores_alone(
    tmp_path: Path, monkeypatch
) -> None:
    """A tiny trial as 2 processes of 1 CPU device each: the same loss curve as in 1 process
    (same global batch of 8, same data order) to float rounding; its last checkpoint, written
    by both, restores in this one process to the model process 0 saved; and 2 processes
    resume from an earlier one to the same curve."""
    from rope_lab.model.factory import make_model
    from rope_lab.trial.checkpoint import TrialCheckpointer, load_model
    from rope_lab.trial.train import init_state

    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    curves = {}
    for n in (1, 2):
        cfg = _cfg(**{"train.processes": n})
        result = run_train_stage(to_dict(cfg), tmp_path / str(n))
        assert result["status"] == "done", result
        assert (result["tokens_seen"], result["resumed_from"]) == (12 * 8 * 16, 0)
        folder = trial_dir(tmp_path / str(n), cfg.trial_id)
        curves[n] = read_trial_table(folder, "train").sort("step")["loss"].to_numpy()
    assert len(curves[2]) == 12
    np.testing.assert_allclose(curves[2], curves[1], rtol=1e-5)
    assert not np.array_equal(curves[2], np.full(12, curves[2][0]))  # it trains

    model, opt_state = init_state(cfg)
    with TrialCheckpointer(folder / "checkpoints", every=6) as ckpt:
        assert ckpt.all_steps() == [6, 12]
        restored, _, step, extra = ckpt.restore(model, opt_state)
    assert (step, extra) == (12, {"data_step": 12})
    saved = load_model(folder / "model.eqx", make_model(cfg))
    for a, b in zip(_leaves(restored), _leaves(saved), strict=True):
        np.testing.assert_array_equal(a, b)

    # Two processes resume from the checkpoint of step 6 that both wrote: the same curve.
    shutil.rmtree(folder / "checkpoints" / "12")
    (folder / "stages" / "train" / "done.json").unlink()
    result = run_train_stage(to_dict(cfg), tmp_path / "2")
    assert (result["status"], result["resumed_from"]) == ("done", 6)
    resumed = read_trial_table(folder, "train").sort("step")["loss"].to_numpy()
    np.testing.assert_allclose(resumed, curves[1], rtol=1e-5)


@pytest.mark.slow
def test_ntk_tracking_over_two_processes_equals_one_process(tmp_path: Path, monkeypatch) -> None:
    """NTK tracking on: with 2 processes, process 0 alone measures (one row per metric and
    step, as in 1 process) and the kernels' numbers equal the 1-process run's (rtol 1e-4, atol
    1e-6 for values at float rounding's scale, ~1e-7: the models differ by the all-reduce's
    rounding)."""
    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    tables = {}
    for n in (1, 2):
        cfg = _cfg(**{"train.processes": n, "ntk.enabled": True})
        result = run_train_stage(to_dict(cfg), tmp_path / str(n))
        assert result["status"] == "done", result
        folder = trial_dir(tmp_path / str(n), cfg.trial_id)
        tables[n] = read_trial_table(folder, "ntk")
        kernels = sorted(p.name for p in (folder / "ntk").glob("kernels_*.npz"))
        tables[f"{n} files"] = kernels
    assert tables["2 files"] == tables["1 files"] and tables["1 files"]
    one, two = tables[1], tables[2]
    keys = [c for c in one.columns if one[c].dtype.is_numeric() and c != "value"]
    strings = [c for c in one.columns if not one[c].dtype.is_numeric()]
    one, two = one.sort([*keys, *strings]), two.sort([*keys, *strings])
    assert two.height == one.height > 0
    assert two.select(keys + strings).equals(one.select(keys + strings))
    values = one["value"].to_numpy()
    assert np.abs(values).max() > 100  # the kernels' scale; near-zero values are rounding
    np.testing.assert_allclose(two["value"].to_numpy(), values, rtol=1e-4, atol=1e-6)


def _leaves(tree):
    import equinox as eqx
    import jax

    return jax.tree.leaves(eqx.filter(tree, eqx.is_array))


def _workers() -> list[int]:
    """Process ids of this test's train workers (children running rope_lab.trial.processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid"))
        if ppid == os.getpid() and b"rope_lab.trial.processes" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


@pytest.mark.slow
def test_a_worker_that_dies_fails_the_trial_with_its_reason(tmp_path: Path, monkeypatch) -> None:
    """Worker 1 killed mid-training: the other is stopped at once, and the trial is recorded
    failed naming the dead process and its exit code (no hang, no `_SUCCESS`)."""
    import threading

    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    cfg = _cfg(**{"train.processes": 2, "train.steps": 100_000, "train.checkpoint_every": 0})
    outcome: dict = {}
    thread = threading.Thread(
        target=lambda: outcome.update(result=run_trial_stages(cfg, tmp_path)), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 60
    while len(_workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = _workers()
    assert len(workers) == 2
    time.sleep(3)
    killed = workers[1]
    os.kill(killed, signal.SIGKILL)
    start = time.monotonic()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert time.monotonic() - start < 15
    status, results = outcome["result"]
    assert status == "failed"
    assert "process 1 of 2 exited with code -9 (SIGKILL)" in results[0]["error"]
    assert _workers() == []
    folder = trial_dir(tmp_path, cfg.trial_id)
    assert not (folder / "_SUCCESS").exists()
    assert "process 1 of 2 exited with code -9 (SIGKILL)" in (folder / "error.txt").read_text()
    row = read_trial_table(folder, "trials").to_dicts()[0]
    assert row["status"] == "failed"
    assert json.dumps(row["error"]).count("exited with code -9 (SIGKILL)") == 1


@pytest.mark.slow  # ~15 s on 2 busy cores: two JAX processes start
def test_a_worker_error_fails_the_stage_with_its_traceback(tmp_path: Path) -> None:
    """Workers that raise (here: the run folder is a file) fail the stage with the exception
    of the first of them, from its own traceback (not the interpreter's shutdown noise)."""
    run_dir = tmp_path / "run"
    run_dir.write_text("not a folder")
    cfg = _cfg(**{"train.processes": 2})
    with pytest.raises(processes.WorkerFailed) as failed:
        processes.run_train_processes(cfg, run_dir)
    message = str(failed.value)
    assert re.match(r"process [01] of 2 exited with code 1:\nTraceback \(most recent call", message)
    folder = trial_dir(run_dir, cfg.trial_id)
    assert message.endswith(f"NotADirectoryError: [Errno 20] Not a directory: '{folder}'\n")

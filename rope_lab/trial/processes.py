"""One trial's train stage as several JAX processes on this machine (`train.processes`).

The stage's driver (`rope_lab.trial.pipeline`, holding the stage lease) starts `processes`
workers, each `python -m rope_lab.trial.processes`: worker k joins the others with
`jax.distributed.initialize` at a coordinator on 127.0.0.1 (cross-process CPU collectives over
gloo), so `jax.devices()` lists every worker's devices, and runs the ordinary train stage
(`stage_work.train_stage`) on one mesh over all of them (`rope_lab.trial.parallel`). Every
worker samples the same batches from the same keys and computes the same numbers; worker 0
writes the train rows, `config.yaml` and `model.eqx`, and all of them save each orbax
checkpoint together (orbax's multi-process save). Worker 0 hands its stage result back in a
JSON file; the driver records it, and evaluation runs once, in the driver, afterwards.

The driver watches its workers: when one exits with an error, the others are stopped and the
stage fails with that worker's exit code and its traceback (or, killed, the end of its
stderr). A worker that cannot reach the coordinator gives up after `INIT_TIMEOUT_S`; one whose
peer vanished mid-step is stopped by the driver (and by JAX's heartbeat after
`HEARTBEAT_TIMEOUT_S`); a worker whose driver dies is killed with it.

Per-process devices: on CPU each worker gets `train.devices` host devices (default 1). The
coordinator port is a free one the driver picks, or `$ROPE_LAB_COORDINATOR_PORT`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from rope_lab.config import TrialConfig, from_dict, to_dict
from rope_lab.typed import ConfigError

PORT_ENV = "ROPE_LAB_COORDINATOR_PORT"
INIT_TIMEOUT_S = 60
HEARTBEAT_TIMEOUT_S = 30
STOP_GRACE_S = 5.0
ERROR_TAIL_LINES = 12


class WorkerFailed(RuntimeError):
    """A worker of a multi-process train stage exited with an error (the message says which,
    its exit code and the end of its error output)."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def coordinator_port() -> int:
    """The coordinator's port: `$ROPE_LAB_COORDINATOR_PORT` when set (ConfigError naming it when
    it is not a port or is in use on 127.0.0.1), else one the OS reports free now."""
    asked = os.environ.get(PORT_ENV)
    if asked is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    if not asked.isdigit() or not 0 < int(asked) < 65536:
        raise ConfigError(f"{PORT_ENV}: not a port number: {asked!r}")
    if not _port_free(int(asked)):
        raise ConfigError(f"{PORT_ENV}: port {asked} on 127.0.0.1 is in use")
    return int(asked)


def check_launch(cfg: TrialConfig) -> None:
    """Before any work: ConfigError when a multi-process trial cannot start here (more
    processes than CPU cores, or the coordinator port in use)."""
    n = cfg.train.processes
    if n == 1:
        return
    cores = os.cpu_count() or 1
    if n > cores:
        raise ConfigError(f"train.processes: {n} processes but this machine has {cores} CPU cores")
    coordinator_port()


def _reason(work: Path, k: int) -> str:
    """Worker k's own traceback, else (killed, or it failed outside Python) its stderr's end."""
    error = work / f"error_{k}.txt"
    return error.read_text() if error.exists() else _tail(work / f"stderr_{k}.txt")


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-ERROR_TAIL_LINES:])


def _signal_name(code: int) -> str:
    return f" ({signal.Signals(-code).name})" if -code in signal.valid_signals() else ""


def _stop(workers: list[subprocess.Popen]) -> None:
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in workers:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_train_processes(
    cfg: TrialConfig, run_dir: Path, tracking: dict | None = None, *, poll_s: float = 0.1
) -> dict:
    """The train stage of `cfg` as `train.processes` JAX workers (module docstring): worker 0's
    stage result; worker 0 alone logs to the trackers of `tracking` (`rope_lab.tracking`, plain
    form). Raises WorkerFailed naming the first worker that exited with an error."""
    n = cfg.train.processes
    port = coordinator_port()
    with tempfile.TemporaryDirectory(prefix="rope_lab_processes_") as tmp:
        work = Path(tmp)
        (work / "config.json").write_text(json.dumps(to_dict(cfg)))
        if tracking is not None:
            (work / "tracking.json").write_text(json.dumps(tracking))
        workers: list[subprocess.Popen] = []
        codes: list[int | None] = []
        try:
            for k in range(n):
                argv = [sys.executable, "-m", "rope_lab.trial.processes", str(work)]
                argv += [str(Path(run_dir).absolute()), f"127.0.0.1:{port}", str(n), str(k)]
                with open(work / f"stderr_{k}.txt", "wb") as err:
                    workers.append(subprocess.Popen(argv, stdout=err, stderr=err))
            while True:
                codes = [p.poll() for p in workers]
                if all(code is not None for code in codes) or any(codes):
                    break
                time.sleep(poll_s)
        finally:
            _stop(workers)
        for k, code in enumerate(codes):  # the first to fail, not those stopped after it
            if code:
                raise WorkerFailed(
                    f"process {k} of {n} exited with code {code}{_signal_name(code)}:\n"
                    + _reason(work, k)
                )
        return dict(json.loads((work / "result.json").read_text()))


def join(coordinator: str, processes: int, process_id: int, local_devices: int) -> None:
    """Join the trial's JAX processes (call before any other JAX work): CPU collectives over
    gloo, `local_devices` CPU devices in this process."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", local_devices)
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=processes,
        process_id=process_id,
        initialization_timeout=INIT_TIMEOUT_S,
        heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
    )


def is_writer() -> bool:
    """Whether this process writes a trial's files: always alone, process 0 of several."""
    import jax

    return jax.process_index() == 0


def _end_with_parent() -> None:
    """Have Linux kill this worker when its driver dies (no orphan left waiting on peers)."""
    if sys.platform.startswith("linux"):
        import ctypes

        set_parent_death_signal = 1  # PR_SET_PDEATHSIG
        ctypes.CDLL(None).prctl(set_parent_death_signal, signal.SIGKILL)


def _worker(work: Path, run_dir: Path, coordinator: str, processes: int, process_id: int) -> None:
    _end_with_parent()
    cfg = from_dict(TrialConfig, json.loads((work / "config.json").read_text()))
    join(coordinator, processes, process_id, cfg.train.devices or 1)
    from rope_lab.trial.pipeline import setup_jax
    from rope_lab.trial.stage_work import train_stage

    setup_jax()
    tracking = work / "tracking.json"
    if process_id == 0 and tracking.exists():
        from rope_lab.tracking.runs import from_plain

        result = train_stage(cfg, run_dir, from_plain(json.loads(tracking.read_text())))
    else:
        result = train_stage(cfg, run_dir)
    if process_id == 0:
        (work / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    folder, run, address, count, index = sys.argv[1:6]
    try:
        _worker(Path(folder), Path(run), address, int(count), int(index))
    except BaseException:
        # Before the interpreter's shutdown adds its own noise to stderr.
        (Path(folder) / f"error_{index}.txt").write_text(traceback.format_exc())
        raise

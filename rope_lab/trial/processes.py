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

The stage asks `launcher_here` for a `Launcher`: these local subprocesses (`LocalLauncher`),
inside a Ray task a placement group across the cluster's nodes running the same workers
(`rope_lab.trial.placement`), or under `srun` this very process as one member
(`from_slurm`, `python -m rope_lab.trial.processes --from-slurm TRIAL_YAML RUN_DIR`;
`rope_lab.trial.slurm_env`).
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
from typing import Protocol

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


class Launcher(Protocol):
    """Starts the `train.processes` members of one trial's train stage and waits for them."""

    def run(self, cfg: TrialConfig, run_dir: Path, tracking: dict | None) -> dict:
        """Worker 0's stage result; WorkerFailed naming the first member that failed."""
        ...


class LocalLauncher:
    """The members as subprocesses of this process, on this machine (`run_train_processes`)."""

    def run(self, cfg: TrialConfig, run_dir: Path, tracking: dict | None) -> dict:
        """`run_train_processes`."""
        return run_train_processes(cfg, run_dir, tracking)


class InPlaceLauncher:
    """This process as member `process_id` (a Slurm task, `from_slurm`): joins the others and
    trains here."""

    def __init__(self, coordinator: str, processes: int, process_id: int):
        self.coordinator, self.processes, self.process_id = coordinator, processes, process_id

    def run(self, cfg: TrialConfig, run_dir: Path, tracking: dict | None) -> dict:
        """This member's train stage result (member 0 writes the trial's files)."""
        join(self.coordinator, self.processes, self.process_id, cfg.train.devices or 1)
        from rope_lab.trial.stage_work import train_stage

        return train_stage(cfg, run_dir)


_in_place: InPlaceLauncher | None = None  # set by `from_slurm` for this process's stage


def launcher_here() -> Launcher:
    """A Slurm task's own process (`from_slurm`); inside a Ray task, a placement group on its
    cluster (`rope_lab.trial.placement`, each bundle what the task itself was given);
    elsewhere, local subprocesses."""
    if _in_place is not None:
        return _in_place
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and ray.get_runtime_context().get_task_id():
        from rope_lab.trial.placement import PlacementLauncher

        return PlacementLauncher.for_this_task()
    return LocalLauncher()


def member_argv(work: Path, run_dir: Path, coordinator: str, n: int, k: int) -> list[str]:
    """The command line of member k of n (`work` holds its config.json)."""
    argv = [sys.executable, "-m", "rope_lab.trial.processes", str(work)]
    return [*argv, str(Path(run_dir).absolute()), coordinator, str(n), str(k)]


def failure_message(work: Path, k: int, n: int, code: int) -> str:
    """`process k of n exited with code C (SIGNAL)` and the member's reason (`work`: its
    folder, with its error or stderr file)."""
    return f"process {k} of {n} exited with code {code}{_signal_name(code)}:\n" + _reason(work, k)


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
                argv = member_argv(work, run_dir, f"127.0.0.1:{port}", n, k)
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
                raise WorkerFailed(failure_message(work, k, n, code))
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


def from_slurm(trial_file: str, run_dir: str, env: dict[str, str]) -> dict:
    """One `srun` task of a multi-process trial (`rope_lab.trial.slurm_env`): task 0 runs the
    train stage under the pipeline's lease (done.json; evaluation is a later `rope-lab train`),
    the others join it as members. ConfigError when the task count is not `train.processes`."""
    global _in_place
    from rope_lab.config import load_trial
    from rope_lab.trial.slurm_env import slurm_task

    task = slurm_task(env)
    cfg = load_trial(trial_file)
    if cfg.train.processes != task.processes:
        raise ConfigError(
            f"train.processes: {cfg.train.processes} in {trial_file} but SLURM_NTASKS is "
            f"{task.processes}"
        )
    _in_place = InPlaceLauncher(task.coordinator, task.processes, task.process_id)
    if task.process_id > 0:
        return _in_place.run(cfg, Path(run_dir), None)
    from rope_lab.trial.pipeline import run_train_stage

    return run_train_stage(to_dict(cfg), run_dir)


def _slurm_main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m rope_lab.trial.processes --from-slurm TRIAL_YAML RUN_DIR")
        return 2
    # The pipeline looks the launcher up in the imported module, not this `__main__`.
    from rope_lab.trial import processes

    try:
        result = processes.from_slurm(argv[0], argv[1], dict(os.environ))
    except ConfigError as err:
        print(f"rope-lab: error: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"status": result.get("status"), "error": result.get("error")}))
    return 0 if result.get("status") in (None, "done") else 1


if __name__ == "__main__" and sys.argv[1:2] == ["--from-slurm"]:
    sys.exit(_slurm_main(sys.argv[2:]))
elif __name__ == "__main__":
    folder, run, address, count, index = sys.argv[1:6]
    try:
        _worker(Path(folder), Path(run), address, int(count), int(index))
    except BaseException:
        # Before the interpreter's shutdown adds its own noise to stderr.
        (Path(folder) / f"error_{index}.txt").write_text(traceback.format_exc())
        raise

"""One trial's train stage as `train.processes` JAX processes across a Ray cluster's nodes.

Under a sweep on Ray, the stage task (`rope_lab.trial.pipeline`) reserves a placement group of N
bundles, each what the stage task itself was given (`resources.num_cpus`, `resources.num_gpus`),
with the sweep spec's `resources.placement_strategy` (default PACK: the members share as few
nodes as fit them, so their per-step all-reduce stays on loopback where it can; SPREAD puts one
per node), which the sweep runner hands each of its tasks (`placed_call`).
A first task in bundle 0 reports its node's IP and a port free there: the coordinator address.
Then member k runs as a Ray task in bundle k that starts the ordinary worker
(`python -m rope_lab.trial.processes`, the same as the local launcher's) on its node and
waits for it; member 0 returns the stage result.

Failures as the local launcher's: the first member whose task ends in error (its worker's exit
code and reason, `process k of N exited with code C`; or Ray's own error when its node or
Ray worker died, `process k of N: ...`) ends the stage; the other members' tasks are cancelled
(force: their Ray workers are killed, and each JAX worker dies with its parent), and the
placement group is removed in every case. A group that cannot be placed within
`PLACEMENT_TIMEOUT_S` fails the stage naming the bundles and the cluster's resources. While the
stage task waits Ray lends out its CPUs, so a cluster of N x `resources.num_cpus` CPUs fits a
trial (`check_cluster`, from the sweep runner before any work).
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rope_lab.config import TrialConfig, to_dict
from rope_lab.trial.processes import WorkerFailed, failure_message, member_argv
from rope_lab.typed import ConfigError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
DEFAULT_STRATEGY = "PACK"
PLACEMENT_TIMEOUT_S = 120.0
# the running Ray task's strategy, set by `placed_call` for the task's work only
_task_strategy: ContextVar[str] = ContextVar("placement_strategy", default=DEFAULT_STRATEGY)


class PlacementTimeout(ConfigError):
    """A trial's placement group could not be placed on the cluster in time."""


def strategy_error(strategy: object) -> str | None:
    """The one-line complaint about `resources.placement_strategy` when it is not one of Ray's
    strategies, else None."""
    if strategy in STRATEGIES:
        return None
    return f"resources.placement_strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}"


def placed_call(strategy: str, fn: Any, *args: Any) -> Any:
    """fn(*args) in a Ray task whose multi-process train stage reserves its placement group with
    `strategy` (`PlacementLauncher.for_this_task`)."""
    token = _task_strategy.set(strategy)
    try:
        return fn(*args)
    finally:
        _task_strategy.reset(token)


def bundle_text(bundle: dict[str, float]) -> str:
    """A bundle as `{CPU: 1, GPU: 0}`."""
    return "{" + ", ".join(f"{key}: {value:g}" for key, value in bundle.items()) + "}"


def check_cluster(processes: int, bundle: dict[str, float], cluster: dict[str, float]) -> None:
    """ConfigError naming `train.processes` when N bundles exceed what the cluster has in all
    (each resource summed over its nodes)."""
    for key, each in bundle.items():
        have = cluster.get(key, 0.0)
        if processes * each > have:
            raise ConfigError(
                f"train.processes: {processes} processes reserve {processes} bundles of "
                f"{bundle_text(bundle)} ({processes * each:g} {key}) but the Ray cluster has "
                f"{have:g} {key}"
            )


def _coordinator_here() -> str:
    """This node's IP and a port free on it now."""
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = int(sock.getsockname()[1])
    return f"{ray.util.get_node_ip_address()}:{port}"


def _member(
    config: dict, tracking: dict | None, run_dir: str, coordinator: str, n: int, k: int
) -> dict | None:
    """Member k of n on this node: its worker's result (member 0) or None; WorkerFailed with
    the worker's exit code and reason when it fails."""
    with tempfile.TemporaryDirectory(prefix="rope_lab_member_") as tmp:
        work = Path(tmp)
        (work / "config.json").write_text(json.dumps(config))
        if tracking is not None and k == 0:
            (work / "tracking.json").write_text(json.dumps(tracking))
        with open(work / f"stderr_{k}.txt", "wb") as err:
            proc = subprocess.Popen(
                member_argv(work, Path(run_dir), coordinator, n, k), stdout=err, stderr=err
            )
        try:
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code:
            raise WorkerFailed(failure_message(work, k, n, code))
        return json.loads((work / "result.json").read_text()) if k == 0 else None


def _reason(err: Exception, k: int, n: int) -> str:
    """The message of a member's failed task: its worker's own (WorkerFailed), else Ray's."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, WorkerFailed):
        return str(cause)
    return f"process {k} of {n}: {type(err).__name__}: {err}"


@dataclass(frozen=True)
class PlacementLauncher:
    """The members as Ray tasks in a placement group of identical bundles."""

    bundle: dict[str, float]
    strategy: str = DEFAULT_STRATEGY
    timeout_s: float = PLACEMENT_TIMEOUT_S

    @classmethod
    def for_this_task(cls) -> PlacementLauncher:
        """Bundles of what the running Ray task was given (CPU and GPU only), placed with the
        strategy its runner handed it (`placed_call`)."""
        import ray

        given = ray.get_runtime_context().get_assigned_resources()
        bundle = {key: float(given.get(key, 0.0)) for key in ("CPU", "GPU") if given.get(key)}
        return cls(bundle or {"CPU": 1.0}, _task_strategy.get())

    def run(self, cfg: TrialConfig, run_dir: Path, tracking: dict | None) -> dict:
        """Worker 0's stage result (module docstring); WorkerFailed naming the first member
        that failed, PlacementTimeout when the group cannot be placed in time."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n = cfg.train.processes
        group = placement_group([dict(self.bundle)] * n, strategy=self.strategy)
        refs: dict[Any, int] = {}
        ended: set[Any] = set()
        try:
            ready, _ = ray.wait([group.ready()], timeout=self.timeout_s)
            if not ready:
                raise PlacementTimeout(
                    f"train.processes: a placement group of {n} bundles of "
                    f"{bundle_text(self.bundle)} ({self.strategy}) was not placed within "
                    f"{self.timeout_s:g} s; the Ray cluster has "
                    f"{bundle_text(ray.cluster_resources())}"
                )

            def place(fn: Any, k: int) -> Any:
                return ray.remote(fn).options(
                    num_cpus=self.bundle.get("CPU", 0.0),
                    num_gpus=self.bundle.get("GPU", 0.0),
                    max_retries=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        group, placement_group_bundle_index=k
                    ),
                )

            coordinator = ray.get(place(_coordinator_here, 0).remote())
            config, folder = to_dict(cfg), str(Path(run_dir).absolute())
            for k in range(n):
                refs[place(_member, k).remote(config, tracking, folder, coordinator, n, k)] = k
            result: dict | None = None
            pending = list(refs)
            while pending:
                (done,), pending = ray.wait(pending, num_returns=1)
                ended.add(done)
                try:
                    out = ray.get(done)
                except Exception as err:
                    raise WorkerFailed(_reason(err, refs[done], n)) from None
                result = out if refs[done] == 0 else result
            assert result is not None
            return dict(result)
        finally:  # only the members still running: their Ray workers are killed
            for ref in refs.keys() - ended:
                ray.cancel(ref, force=True)
            remove_placement_group(group)

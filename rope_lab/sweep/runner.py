"""Run a sweep: per trial, the stages of `stage_plan.trial_stages` not finished yet (a train
stage, then the stages reading the trained model from disk: as trained, and one per scaling),
then its trials row (all from `rope_lab.trial.pipeline`). With the spec's `pack_seeds`, the train
stages of trials equal but for their seeds run as one task (`pipeline.run_pack_train`, one
vmapped program; `rope_lab.trial.packing`), which asks for one trial's resources; each
member's evaluation stages then run as its own tasks, as for a trial trained alone.
Ray core tasks (in-process Ray by default, any cluster with `address`), or a serial runner with
the same interface for tests and debugging. In-process Ray listens on loopback only and its
processes end with the driver, even one killed (`rope_lab.runtime.local_ray`); a cluster keeps
the addresses its owner configured.

The driver skips finished trials before importing JAX, records failures with their tracebacks
and carries on, retries crashed workers (Ray `max_retries`), and always shuts Ray down.
With the spec's `tracking` block, each train stage logs to the trackers as it trains and the
driver logs each finished trial's evaluation rows (`rope_lab.tracking`); a tracker that fails
prints one `warning:` line and never fails a trial.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rope_lab.config import ConfigError, TrialConfig, to_dict
from rope_lab.results import is_finished, trial_dir
from rope_lab.runtime.allocator import worker_env
from rope_lab.runtime.device_share import device_env
from rope_lab.runtime.local_ray import LocalRay
from rope_lab.sweep.spec import Resources, SweepSpec
from rope_lab.tracking.config import for_workers
from rope_lab.tracking.runs import from_plain
from rope_lab.trial.config import rich_sibling
from rope_lab.trial.packing import Pack, plan_packs
from rope_lab.trial.pipeline import (
    TRAIN_STAGE,
    finish_trial,
    read_done,
    run_pack_train,
    run_stage,
    stage_dir,
)
from rope_lab.trial.placement import check_cluster, placed_call, strategy_error
from rope_lab.trial.stage_plan import eval_stages, trial_stages


class Runner(Protocol):
    """Submit functions, wait for any of them, cancel the rest, shut down."""

    def submit(self, fn: Callable[..., dict], *args: Any) -> Any: ...
    def wait(self, handles: list[Any]) -> tuple[Any, dict]: ...
    def cancel(self, handles: list[Any]) -> None: ...
    def shutdown(self) -> None: ...


class SerialRunner:
    """Runs each submitted call in this process, in submission order, when waited on."""

    def __init__(self) -> None:
        self._queue: dict[int, tuple[Callable[..., dict], tuple]] = {}
        self._next = 0

    def submit(self, fn: Callable[..., dict], *args: Any) -> int:
        """Queue a call; returns its handle."""
        self._next += 1
        self._queue[self._next] = (fn, args)
        return self._next

    def wait(self, handles: list[Any]) -> tuple[Any, dict]:
        """Run the oldest pending call and return (handle, result)."""
        handle = min(handles)
        fn, args = self._queue.pop(handle)
        return handle, fn(*args)

    def cancel(self, handles: list[Any]) -> None:
        """Drop queued calls."""
        for h in handles:
            self._queue.pop(h, None)

    def shutdown(self) -> None:
        """Nothing to release."""


def fits(resources: Resources, cluster: dict[str, float]) -> None:
    """ConfigError naming the key when one trial's request exceeds what the cluster has (on the
    in-process cluster, which never grows, such a task would wait forever)."""
    for key, name, want in (("num_cpus", "CPU", resources.num_cpus),
                            ("num_gpus", "GPU", resources.num_gpus)):  # fmt: skip
        have = cluster.get(name, 0.0)
        if want > have:
            raise ConfigError(
                f"resources.{key}: each trial asks for {want:g} {name} but the in-process Ray "
                f"cluster has {have:g}; lower it, run on a cluster (--address), or run the "
                "stages here with --runner serial"
            )


class RayRunner:
    """Ray core tasks with per-trial resources; a crashed worker is retried `max_retries` times."""

    def __init__(
        self,
        resources: Resources,
        max_retries: int,
        address: str | None = None,
        processes: int = 1,
    ):
        import ray

        refused = strategy_error(resources.placement_strategy)
        if refused:  # named before Ray starts
            raise ConfigError(refused)
        self._strategy = resources.placement_strategy

        self._ray = ray
        self._local: LocalRay | None = None
        if not ray.is_initialized():
            init: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "runtime_env": {"env_vars": worker_env()},
            }
            if address is None and not os.environ.get("RAY_ADDRESS"):
                self._local = LocalRay(ray, **init)  # loopback only, reaped with the driver
            else:  # a cluster: its addresses are what its owner configured
                ray.init(address=address, **init)
        try:
            if self._local is not None:  # it never grows: a task it cannot fit waits
                fits(resources, ray.cluster_resources())
            if processes > 1:  # the sweep's largest placement group (rope_lab.trial.placement)
                bundle = {"CPU": resources.num_cpus, "GPU": resources.num_gpus}
                check_cluster(processes, bundle, ray.cluster_resources())
        except ConfigError:
            self.shutdown()  # nothing of Ray left behind by a sweep refused before work
            raise
        # Resources go to ray.remote itself, not .options(): only then does a GPU task get a
        # fresh worker process each time, so JAX's device memory is released between trials.
        # The environment goes with each task, so it applies on a cluster started by anyone.
        self._remote = ray.remote(
            num_cpus=resources.num_cpus,
            num_gpus=resources.num_gpus,
            max_retries=max_retries,
            retry_exceptions=False,
            runtime_env={"env_vars": {**worker_env(), **device_env(resources.num_gpus)}},
        )(placed_call)

    def submit(self, fn: Callable[..., dict], *args: Any) -> Any:
        """Start a task; returns its ObjectRef. A multi-process train stage in it places its
        members with `resources.placement_strategy` (`placement.placed_call`)."""
        return self._remote.remote(self._strategy, fn, *args)

    def wait(self, handles: list[Any]) -> tuple[Any, dict]:
        """Block until one task ends; a crashed task (retries exhausted) becomes a failure."""
        (ready,), _ = self._ray.wait(handles, num_returns=1)
        try:
            return ready, self._ray.get(ready)
        except Exception as err:  # worker died past its retries, or the task was cancelled
            return ready, {"status": "failed", "error": f"{type(err).__name__}: {err}"}

    def cancel(self, handles: list[Any]) -> None:
        """Cancel running and queued tasks."""
        for h in handles:
            self._ray.cancel(h, force=True)

    def shutdown(self) -> None:
        """Disconnect (and stop the in-process cluster and its reaper if this driver started
        them)."""
        if self._local is not None:
            self._local.shutdown()
        else:
            self._ray.shutdown()


@dataclass
class TrialState:
    """What the driver knows of one trial while the sweep runs."""

    cfg: TrialConfig
    pending: set[str] = field(default_factory=set)
    results: list[dict] = field(default_factory=list)


@dataclass
class SweepSummary:
    """Counts and per-trial outcomes of one `run_sweep` call."""

    run_dir: Path
    statuses: dict[str, str]
    wall_time_s: float
    skipped: int
    stages: dict[str, list[dict]] = field(default_factory=dict)

    def count(self, status: str) -> int:
        """Number of trials with this status."""
        return sum(1 for s in self.statuses.values() if s == status)


class Progress:
    """One status line, e.g. `3/8 trials finished (13/31 stages): 1 failed, 2 skipped; 2 stages
    active; elapsed 40s, ETA 67s`. Trials: finished (done, diverged or failed, plus the skipped
    ones finished before) of all the sweep's trials. Stages: this run's stage tasks ended of
    those planned (each trial to run: its stages not finished before; a train stage that does
    not end `done` takes its trial's other stages off the plan). Active:
    stage tasks queued or running. ETA: elapsed per finished trial x trials left. Rewritten in
    place on a TTY; otherwise printed once per finished trial, after a line per ended stage
    (`stage_ended`), so a log piped to a file shows life before the first trial ends. `begin`
    prints what the sweep is about to run."""

    def __init__(self, total: int, skipped: int, stages: int = 0, stream=None):
        self.total, self.skipped = total, skipped
        self.stream = sys.stderr if stream is None else stream  # the current one, not import's
        self.done = self.failed = self.running = 0
        self.stages_done, self.stages_total = 0, stages
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()

    def line(self) -> str:
        """The current status line."""
        finished = self.done + self.failed
        elapsed = time.perf_counter() - self.start
        remaining = self.total - self.skipped - finished
        eta = f"{elapsed / finished * remaining:.0f}s" if finished else "?"
        return (
            f"{finished + self.skipped}/{self.total} trials finished "
            f"({self.stages_done}/{self.stages_total} stages): {self.failed} failed, "
            f"{self.skipped} skipped; {self.running} stages active; "
            f"elapsed {elapsed:.0f}s, ETA {eta}"
        )

    def begin(
        self, name: str, runner: str, resources: Resources, packs: list[Pack] | None = None
    ) -> None:
        """Print the sweep's opening line: its trials, stages to run, runner and resources; with
        `packs` (packed seeds), how many train stages run packed."""
        packing = ""
        if packs is not None:
            packed = [p for p in packs if p.packed]
            members = sum(len(p.trials) for p in packed)
            tasks = "1 task" if len(packed) == 1 else f"{len(packed)} tasks"
            packing = f"; seeds packed: {members} train stages in {tasks}"
        self.stream.write(
            f"sweep {name}: {self.total} trials ({self.skipped} finished before), "
            f"{self.stages_total} stages to run on {runner}; each stage task asks for "
            f"{resources.num_cpus:g} CPU, {resources.num_gpus:g} GPU{packing}\n"
        )
        self.stream.flush()

    def stage_ended(self, trial_id: str, stage: str, status: str, seconds: float) -> None:
        """On a stream that is not a TTY, print a line for one ended stage task."""
        if not self.tty:
            self.stream.write(f"  {trial_id} {stage}: {status} after {seconds:.0f}s\n")
            self.stream.flush()

    def show(self) -> None:
        """Print the current line."""
        line = self.line()
        self.stream.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the line."""
        if self.tty:
            self.stream.write("\n")


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path = "runs",
    *,
    runner: str = "ray",
    address: str | None = None,
    progress: bool = True,
) -> SweepSummary:
    """Run every unfinished trial of `spec` under `out_dir/spec.name`, logging to the trackers
    of `spec.tracking`; return the summary."""
    run_dir = Path(out_dir) / spec.name
    (run_dir / "trials").mkdir(parents=True, exist_ok=True)  # a run directory from the start
    tracking = for_workers(spec.tracking, run_dir)
    tracked = () if tracking is None else (tracking,)  # the stage tasks' last argument
    live = from_plain(tracking)

    def warn(lines: list[str]) -> None:
        for line in lines:
            print(f"warning: {line}", file=bar.stream if progress else sys.stderr, flush=True)

    def finished_stage(t: TrialConfig, name: str) -> dict | None:
        return read_done(stage_dir(run_dir, t.trial_id, name))

    def stage_names(t: TrialConfig) -> list[str]:
        return [stage.name for stage in trial_stages(t)]

    todo = [
        t for t in spec.trials if not is_finished(trial_dir(run_dir, t.trial_id), stage_names(t))
    ]
    statuses = {t.trial_id: "skipped" for t in spec.trials}
    planned = sum(1 for t in todo for name in stage_names(t) if finished_stage(t, name) is None)
    bar = Progress(len(spec.trials), len(spec.trials) - len(todo), planned)
    start = time.perf_counter()
    if not todo:
        if progress:
            bar.show()
            bar.close()
        return SweepSummary(run_dir, statuses, 0.0, bar.skipped)

    # Packs of trials whose train stage is still to run (the others' are recorded as cached).
    packs = plan_packs([t for t in todo if finished_stage(t, TRAIN_STAGE) is None], spec.pack_seeds)
    if progress:
        where = "the serial runner" if runner == "serial" else f"Ray ({address or 'in-process'})"
        bar.begin(spec.name, where, spec.resources, packs if spec.pack_seeds else None)
    backend: Runner = (
        SerialRunner()
        if runner == "serial"
        else RayRunner(
            spec.resources,
            spec.max_retries,
            address,
            max(t.train.processes for t in todo),
        )
    )
    states = {t.trial_id: TrialState(t) for t in todo}
    handles: dict[Any, tuple[tuple[str, ...], str, float]] = {}  # task -> trials, stage, time

    def run(t: TrialConfig, name: str) -> None:
        """Submit stage `name`, or record its earlier result when it has finished before."""
        cached = finished_stage(t, name)
        if cached is not None:
            states[t.trial_id].results.append({"stage": name, **cached, "cached": True})
            if name == TRAIN_STAGE:
                after_train(t, cached)
            return
        handles[backend.submit(run_stage, to_dict(t), str(run_dir), name, *tracked)] = (
            (t.trial_id,),
            name,
            time.time(),
        )
        states[t.trial_id].pending.add(name)
        bar.running = len(handles)

    def run_pack(members: tuple[TrialConfig, ...]) -> None:
        """Submit the train stages of a pack as one task."""
        configs = [to_dict(t) for t in members]
        handle = backend.submit(run_pack_train, configs, str(run_dir), *tracked)
        handles[handle] = (tuple(t.trial_id for t in members), TRAIN_STAGE, time.time())
        for t in members:
            states[t.trial_id].pending.add(TRAIN_STAGE)
        bar.running = len(handles)

    def after_train(t: TrialConfig, result: dict) -> None:
        if result.get("status") == "done":
            for stage in eval_stages(t):
                run(t, stage.name)
        else:  # not run: off the plan
            bar.stages_total -= sum(1 for s in eval_stages(t) if finished_stage(t, s.name) is None)

    def finish_if_ended(trial_id: str) -> None:
        state = states[trial_id]
        if state.pending or trial_id in ended:
            return
        ended.add(trial_id)
        if any(r.get("status") == "busy" for r in state.results):
            statuses[trial_id] = "busy"
            return
        statuses[trial_id] = finish_trial(run_dir, state.cfg, state.results, sweep=spec.name)
        if statuses[trial_id] == "done" and live is not None:
            from rope_lab.tracking.trial_logs import log_evaluation

            warn(log_evaluation(live, run_dir, state.cfg))
        if statuses[trial_id] == "failed":
            bar.failed += 1
        else:
            bar.done += 1
        if progress and not bar.tty:
            bar.show()

    # matched twins (`train.match.target: network`) whose rich sibling in this sweep has not
    # trained yet, by the sibling's trial id: their train stage starts when the sibling's ends
    waiting: dict[str, list[TrialConfig]] = {}

    def sibling_to_wait_for(t: TrialConfig) -> str | None:
        if t.train.match.target != "network":
            return None
        sibling = rich_sibling(t).trial_id
        if sibling in states and finished_stage(states[sibling].cfg, TRAIN_STAGE) is None:
            return sibling
        return None

    ended: set[str] = set()
    try:
        packed = {t.trial_id for p in packs if p.packed for t in p.trials}
        for t in todo:  # trained before: their evaluation stages start at once
            if (sibling := sibling_to_wait_for(t)) is not None:
                waiting.setdefault(sibling, []).append(t)
            elif t.trial_id not in packed:
                run(t, TRAIN_STAGE)
                finish_if_ended(t.trial_id)
        for pack in packs:
            if pack.packed:
                run_pack(pack.trials)
        while handles:
            if progress and bar.tty:
                bar.show()
            handle, result = backend.wait(list(handles))
            trial_ids, stage, submitted = handles.pop(handle)
            bar.running = len(handles)
            # a pack's task returns each member's result; a crashed task, one for all
            members = result.get("members") or {}
            for trial_id in trial_ids:
                own = members.get(trial_id, result)
                state = states[trial_id]
                state.pending.discard(stage)
                # From submission to the stage's own start: scheduling, worker start, imports.
                queued = own.get("started_at", submitted) - submitted
                state.results.append(
                    {"stage": stage, "submitted_at": submitted, "queued_s": queued, **own}
                )
                bar.stages_done += 1
                if progress:
                    seconds = time.time() - submitted
                    bar.stage_ended(trial_id, stage, str(own.get("status", "?")), seconds)
                warn(own.get("tracking_warnings", []))
                if stage == TRAIN_STAGE:
                    after_train(state.cfg, own)
                    for twin in waiting.pop(trial_id, []):
                        run(twin, TRAIN_STAGE)
                        finish_if_ended(twin.trial_id)
                bar.running = len(handles)
                finish_if_ended(trial_id)
    except KeyboardInterrupt:
        backend.cancel(list(handles))
        raise
    finally:
        backend.shutdown()
        if progress:
            bar.close()
    stages = {trial_id: state.results for trial_id, state in states.items()}
    return SweepSummary(run_dir, statuses, time.perf_counter() - start, bar.skipped, stages)

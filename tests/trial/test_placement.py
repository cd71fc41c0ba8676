"""A multi-process train stage under Ray: a placement group of one bundle per process.

The pure checks pin what is refused before any work (a strategy Ray does not have, more bundles
than the cluster holds), the launcher chosen outside Ray, and the spec's strategy reaching the
launcher inside a task (a stand-in `ray`). The slow tests run the train stage
as a task of the sweep's `RayRunner` on the in-process cluster: two processes placed by the
group give the one-process losses, and a member killed mid-training fails the stage naming it,
with its placement group removed and no worker left.
"""

import os
import re
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rope_lab.config import ConfigError, replace, to_dict
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.sweep.spec import Resources
from rope_lab.trial import placement
from rope_lab.trial.processes import LocalLauncher, launcher_here
from tests.helpers import tiny_trial


def _cfg(**changes: object):
    base = tiny_trial("rope", steps=12, checkpoint_every=6)
    return replace(base, **{"ntk.enabled": False, "train.log_every": 1, **changes})


def test_cluster_check() -> None:
    """N bundles over the cluster's total of a resource are one line; a group that fits passes;
    outside a Ray task the launcher is local."""
    with pytest.raises(
        ConfigError,
        match=r"^train\.processes: 3 processes reserve 3 bundles of \{CPU: 1, GPU: 0\} "
        r"\(3 CPU\) but the Ray cluster has 2 CPU$",
    ):
        placement.check_cluster(3, {"CPU": 1.0, "GPU": 0.0}, {"CPU": 2.0})
    with pytest.raises(ConfigError, match=r"\(1 GPU\) but the Ray cluster has 0 GPU$"):
        placement.check_cluster(2, {"CPU": 1.0, "GPU": 0.5}, {"CPU": 8.0})
    placement.check_cluster(2, {"CPU": 1.0, "GPU": 0.0}, {"CPU": 2.0})
    assert isinstance(launcher_here(), LocalLauncher)


class _InTask:
    """Stands in for `ray` as seen from inside a task: connected, in a task given `given`, and
    `ray.remote` running the task's function at once (what the worker would run)."""

    def __init__(self, monkeypatch, given: dict[str, float]) -> None:
        import ray

        context = SimpleNamespace(get_task_id=lambda: "task", get_assigned_resources=lambda: given)
        monkeypatch.setattr(ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
        monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init"))
        monkeypatch.setattr(
            ray, "remote", lambda **_: lambda fn: SimpleNamespace(remote=lambda *a: fn(*a))
        )


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_SPREAD"])
def test_the_launcher_places_members_with_the_specs_strategy(monkeypatch, strategy) -> None:
    """`resources.placement_strategy` travels from the sweep runner with each task to the
    placement launcher the task's train stage asks for, with bundles of what the task got."""
    from rope_lab.sweep.runner import RayRunner

    _InTask(monkeypatch, {"CPU": 2.0, "memory": 1e9})
    runner = RayRunner(Resources(num_cpus=2, placement_strategy=strategy), max_retries=0)
    launcher = runner.submit(launcher_here)
    assert launcher == placement.PlacementLauncher({"CPU": 2.0}, strategy)


def test_a_strategy_ray_does_not_have_is_refused_before_ray_starts(monkeypatch) -> None:
    from rope_lab.sweep.runner import RayRunner

    _InTask(monkeypatch, {"CPU": 1.0})
    with pytest.raises(
        ConfigError,
        match=r"^resources\.placement_strategy: 'spread' is not one of PACK, SPREAD, "
        r"STRICT_PACK, STRICT_SPREAD$",
    ):
        RayRunner(Resources(placement_strategy="spread"), max_retries=0)


def _members(folder: Path) -> list[list[str]]:
    """Command lines of the train workers writing under `folder` (children of Ray workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, UnicodeDecodeError):
            continue
        if "rope_lab.trial.processes" in argv and any(str(folder) in a for a in argv):
            found.append([entry.name, *argv])
    return found


@pytest.fixture
def runner(monkeypatch):
    from rope_lab.sweep.runner import RayRunner

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    backend = RayRunner(Resources(num_cpus=1, num_gpus=0), max_retries=0, processes=2)
    yield backend
    backend.shutdown()


def _stage(runner, cfg, run_dir: Path) -> dict:
    from rope_lab.trial.pipeline import run_train_stage

    handle = runner.submit(run_train_stage, to_dict(cfg), str(run_dir))
    return runner.wait([handle])[1]


CRASH_SIGNS = re.compile(
    r"SIGSEGV|SIGABRT|SIGBUS|Fatal Python error|Check failed|\*\*\* SIG|core dumped|"
    r"terminate called"
)


def _crash_lines(logs: Path = Path("/tmp/ray/session_latest/logs"), most: int = 40) -> str:
    """The lines of the local Ray session's logs that say why a worker died (a fatal signal, a
    failed check), for the message of a test that met a crashed Ray worker."""
    found = [
        f"{path.name}: {line.strip()}"
        for path in sorted(logs.glob("*"))
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
        if CRASH_SIGNS.search(line)
    ]
    return "\n".join(found[-most:]) or f"no crash line in {logs}"


def _groups_left() -> list[str]:
    import ray

    table = ray.util.placement_group_table()
    return [g["state"] for g in table.values() if g["state"] != "REMOVED"]


@pytest.mark.slow
@pytest.mark.ray
def test_runner_refuses_more_bundles_than_the_cluster_before_work(monkeypatch) -> None:
    """A sweep whose largest trial reserves more CPUs than the in-process cluster has: one line
    from the runner before any task, and Ray is shut down again."""
    import ray

    from rope_lab.sweep.runner import RayRunner

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cores = float(os.cpu_count() or 1)
    with pytest.raises(
        ConfigError,
        match=rf"^train\.processes: 9 processes reserve 9 bundles of \{{CPU: {cores:g}, GPU: 0\}} "
        rf"\({9 * cores:g} CPU\) but the Ray cluster has {cores:g} CPU$",
    ):
        RayRunner(Resources(num_cpus=cores, num_gpus=0), max_retries=0, processes=9)
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.ray
def test_two_processes_in_a_placement_group_train_as_one(runner, tmp_path: Path) -> None:
    """The train stage as a Ray task with train.processes 2: the group's two members give the
    loss curve of one process (rtol 1e-5), and the group is removed afterwards."""
    curves = {}
    for n in (1, 2):
        cfg = _cfg(**{"train.processes": n})
        result = _stage(runner, cfg, tmp_path / str(n))
        assert result["status"] == "done", result
        assert result["tokens_seen"] == 12 * 8 * 16
        folder = trial_dir(tmp_path / str(n), cfg.trial_id)
        curves[n] = read_trial_table(folder, "train").sort("step")["loss"].to_numpy()
    assert len(curves[2]) == 12
    np.testing.assert_allclose(curves[2], curves[1], rtol=1e-5)
    assert not np.array_equal(curves[2], np.full(12, curves[2][0]))  # it trains
    assert _groups_left() == []


@pytest.mark.slow
@pytest.mark.ray
def test_a_killed_member_fails_the_stage_naming_it(runner, tmp_path: Path) -> None:
    """Member 1's worker killed mid-training: the stage fails within 30 s with `process 1 of 2
    exited with code -9 (SIGKILL)`, no member's worker is left and the group is removed."""
    cfg = _cfg(**{"train.processes": 2, "train.steps": 100_000, "train.checkpoint_every": 0})
    from rope_lab.trial.pipeline import run_train_stage

    handle = runner.submit(run_train_stage, to_dict(cfg), str(tmp_path))
    deadline = time.monotonic() + 120
    while len(_members(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    members = _members(tmp_path)
    assert sorted(m[-1] for m in members) == ["0", "1"]
    time.sleep(5)  # both in the training loop
    os.kill(int(next(m[0] for m in members if m[-1] == "1")), signal.SIGKILL)
    start = time.monotonic()
    result = runner.wait([handle])[1]
    assert time.monotonic() - start < 30
    assert result["status"] == "failed"
    assert "WorkerFailed: process 1 of 2 exited with code -9 (SIGKILL)" in result["error"], (
        f"{result['error']}\n{_crash_lines()}"
    )
    deadline = time.monotonic() + 15
    while _members(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _members(tmp_path) == []
    assert _groups_left() == []


def test_the_strategy_lasts_only_for_its_task(monkeypatch) -> None:
    """A task run with SPREAD sees SPREAD; the next call, in the same worker process, runs
    with the default again (nothing carried from one task to the next)."""
    _InTask(monkeypatch, {"CPU": 1.0})
    seen = placement.placed_call("SPREAD", lambda: launcher_here().strategy)
    assert seen == "SPREAD"
    assert placement.PlacementLauncher.for_this_task().strategy == placement.DEFAULT_STRATEGY

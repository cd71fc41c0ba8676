"""The in-process Ray helpers: loopback addresses, the node address Ray resolves, and the reaper
that kills recorded processes once its driver's pipe closes (on shutdown or the driver's death)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rope_lab.runtime import local_ray

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize(
    "address, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # how a dual-stack socket shows an IPv4 loopback bind
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.2", False),
        ("::ffff:192.0.2.2", False),
    ],
)
def test_loopback_addresses(address, loopback):
    assert local_ray.is_loopback(address) is loopback


def test_ray_resolves_the_node_address_to_loopback_only_inside_the_context():
    from ray._private import ray_constants, services

    before = ray_constants.ENABLE_RAY_CLUSTER
    with local_ray.loopback_node_address():
        assert services.get_node_ip_address() == "127.0.0.1"
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert ray_constants.ENABLE_RAY_CLUSTER is before


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


@linux_only
def test_descendants_and_start_times_come_from_proc():
    child = _sleeper()
    try:
        started = local_ray.start_time(child.pid)
        assert started is not None and started >= local_ray.start_time(os.getpid())
        assert (child.pid, started) in local_ray.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert local_ray.start_time(child.pid) is None


@linux_only
def test_the_reaper_kills_recorded_processes_when_the_pipe_closes_and_spares_a_reused_pid():
    recorded, reused = _sleeper(), _sleeper()
    try:
        processes = [
            (recorded.pid, local_ray.start_time(recorded.pid)),
            (reused.pid, local_ray.start_time(reused.pid) + 1),  # a pid now held by another
        ]
        reaper = local_ray.start_reaper(processes)
        time.sleep(0.2)
        assert recorded.poll() is None  # nothing happens while the pipe is open
        reaper.communicate(timeout=20)
        assert recorded.wait(timeout=5) == -signal.SIGKILL
        assert reused.poll() is None
    finally:
        for p in (recorded, reused):
            p.kill()
            p.wait()


DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    from rope_lab.runtime import local_ray
    ray_process = subprocess.Popen(["sleep", "60"])
    local_ray.start_reaper([(ray_process.pid, local_ray.start_time(ray_process.pid))])
    print(ray_process.pid, flush=True)
    time.sleep(60)
    """
)


@linux_only
def test_the_reaper_acts_when_its_driver_is_killed():
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    orphan = int(driver.stdout.readline())
    started = local_ray.start_time(orphan)
    assert started is not None
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=10)
    deadline = time.monotonic() + 10
    while local_ray.start_time(orphan) == started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert local_ray.start_time(orphan) != started, "the driver's child outlived it"


class _SpawningRay:
    """Stands in for `ray`: init starts one child process (as Ray starts its GCS and raylet)."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen] = []
        self.util = self

    def init(self, **kwargs) -> None:
        self.children.append(_sleeper())

    def get_node_ip_address(self) -> str:
        return "127.0.0.1"

    def shutdown(self) -> None:
        pass


@linux_only
def test_the_reaper_gets_only_the_processes_ray_init_started(monkeypatch):
    """A child the driver had before `ray.init` is not Ray's and is never reaped."""
    ours = _sleeper()
    ray = _SpawningRay()
    recorded: list[list[tuple[int, int]]] = []
    monkeypatch.setattr(local_ray, "start_reaper", lambda processes: recorded.append(processes))
    try:
        local_ray.LocalRay(ray)
        (rays,) = ray.children
        assert recorded == [[(rays.pid, local_ray.start_time(rays.pid))]]
    finally:
        for p in (ours, *ray.children):
            p.kill()
            p.wait()

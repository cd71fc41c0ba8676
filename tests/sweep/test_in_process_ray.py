"""The in-process Ray cluster of `sweep run --runner ray` without `--address`: every process of
it listens on loopback only, and none outlives a driver killed with SIGKILL.

The driver is a separate process running a `RayRunner` with one finished task and one still
running, so the cluster has its GCS, raylet, agents and two workers; the test reads that
process tree with psutil.
"""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

from rope_lab.runtime.local_ray import is_loopback

pytestmark = [pytest.mark.slow, pytest.mark.ray]

DRIVER = textwrap.dedent(
    """
    import time
    from rope_lab.sweep.runner import RayRunner
    from rope_lab.sweep.spec import Resources

    def pid():
        import os
        return {"pid": os.getpid()}

    def busy():
        import time
        end = time.time() + 300
        while time.time() < end:
            sum(range(10_000))
        return {}

    runner = RayRunner(Resources(num_cpus=1, num_gpus=0), max_retries=0)
    runner.wait([runner.submit(pid)])
    runner.submit(busy)
    time.sleep(2)  # the busy task's worker starts
    print("READY", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def driver() -> Iterator[subprocess.Popen]:
    """A sweep driver with its in-process Ray cluster up; killed with its tree at the end."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**env, "RAY_DISABLE_USAGE_STATS": "1"},
        start_new_session=True,
    )
    tree = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", "the driver did not start Ray"
        tree = psutil.Process(proc.pid).children(recursive=True)
        yield proc
    finally:
        for p in [proc, *tree]:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                p.kill()
        proc.wait(timeout=30)


def listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of these processes."""
    found = []
    for p in processes:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    found.append((p.name(), c.laddr.ip, c.laddr.port))
        except psutil.NoSuchProcess:
            pass
    return found


def test_every_process_of_the_in_process_cluster_listens_on_loopback_only(driver):
    root = psutil.Process(driver.pid)
    tree = [root, *root.children(recursive=True)]
    sockets = listening(tree)
    print(f"\n{len(tree)} processes, {len(sockets)} listening sockets:")
    for name, ip, port in sockets:
        print(f"  {name} {ip}:{port}")
    names = {p.name() for p in tree}
    assert {"gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names
    listeners = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= listeners
    assert [s for s in sockets if not is_loopback(s[1])] == []


def test_no_process_of_the_in_process_cluster_outlives_a_killed_driver(driver):
    tree = psutil.Process(driver.pid).children(recursive=True)
    assert len(tree) >= 6, [p.name() for p in tree]
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    killed = time.monotonic()
    alive = tree
    while alive and time.monotonic() - killed < 20:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    print(f"\n{len(tree)} processes gone {time.monotonic() - killed:.1f}s after the driver")
    assert [p.name() for p in alive] == []  # before: the agents stayed 60 s

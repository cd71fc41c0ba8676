"""In-process Ray for a one-machine sweep: every process listens on loopback only, and none
outlives the driver.

Addresses. On Linux `ray.init()` takes the host's routable address as the node address, and its
processes bind to it or to every interface (GCS, raylet, workers, agents). They bind to loopback
only when the node address is loopback, which Ray chooses itself only where it believes clusters
unsupported (`ray_constants.ENABLE_RAY_CLUSTER`, from `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`, read
once at import; a `_node_ip_address` of 127.0.0.1 is turned back into the host's address).
`start` clears that flag for the duration of `ray.init` (so it works whenever `ray` was imported)
and refuses a node address that still is not loopback, so a Ray upgrade that changes this fails
loudly instead of listening on the network.

Lifetime. Ray ties the processes it starts from the driver (GCS, raylet, monitors) to it with
the kernel's parent-death signal, but the raylet's dashboard and runtime-env agents notice their
raylet's death only by polling, then spend up to 60 s reporting it to the already dead GCS.
`start` therefore launches a reaper: a small process in its own session holding the read end of
a pipe from the driver. When the pipe closes (shutdown, or the driver's death by any signal) it
kills the processes `ray.init` started that are still alive (the driver's descendants after it
less those before; matched by pid and start time, so a reused pid is never hit). Linux only:
elsewhere Ray starts its own reaper.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROC = Path("/proc")


def is_loopback(address: str) -> bool:
    """Whether an IP address (v4, v6, or v4-mapped v6) is a loopback address."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@contextlib.contextmanager
def loopback_node_address() -> Iterator[None]:
    """While open, Ray resolves this node's address to loopback (see the module docstring)."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def start_time(pid: int) -> int | None:
    """The kernel's start time of process `pid` (clock ticks since boot), None when it has
    exited (a zombie included)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # from field 3 on; the name may hold spaces
    return None if fields[0] in ("Z", "X") else int(fields[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every living descendant of process `pid`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        started = start_time(child)
        if started is not None:
            found.append((child, started))
            todo.extend(children.get(child, []))
    return found


def start_reaper(processes: list[tuple[int, int]]) -> subprocess.Popen:
    """Start the reaper for `processes` ((pid, start time) pairs); closing its stdin ends it."""
    return subprocess.Popen(
        [sys.executable, "-m", "rope_lab.runtime.local_ray", *(f"{p}:{t}" for p, t in processes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # neither a terminal's Ctrl-C nor the driver's group reaches it
    )


def reap(processes: list[tuple[int, int]]) -> int:
    """SIGKILL each (pid, start time) process still alive with that start time; returns how many."""
    killed = 0
    for pid, started in processes:
        if start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


class LocalRay:
    """An in-process Ray cluster on loopback with its reaper; `shutdown` ends both."""

    def __init__(self, ray: Any, **init_kwargs: Any):
        linux = sys.platform.startswith("linux")
        before = set(descendants(os.getpid())) if linux else set()  # not Ray's: never reaped
        with loopback_node_address():
            ray.init(**init_kwargs)
        self._ray = ray
        self.node_address = ray.util.get_node_ip_address()
        if not is_loopback(self.node_address):
            ray.shutdown()
            raise RuntimeError(
                f"in-process Ray took node address {self.node_address}, not loopback: this Ray "
                "version resolves addresses differently from the one rope_lab was written for"
            )
        started = [p for p in descendants(os.getpid()) if p not in before] if linux else []
        self._reaper = start_reaper(started) if linux else None

    def shutdown(self) -> None:
        """Stop Ray, then let the reaper kill whatever of it is left and exit."""
        self._ray.shutdown()
        if self._reaper is not None:
            self._reaper.communicate()  # closes the pipe; waits for the reaper


def main(argv: list[str]) -> None:
    """The reaper: wait for the driver's pipe to close, then kill the listed `pid:start`s."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    processes = [tuple(map(int, item.split(":"))) for item in argv]
    while sys.stdin.buffer.read(4096):
        pass
    reap([(pid, started) for pid, started in processes])


if __name__ == "__main__":
    main(sys.argv[1:])

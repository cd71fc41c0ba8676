"""Per-trial lease: an exclusive, non-blocking ``flock`` on ``<trial_dir>/.lock``."""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import Self

from rope_lab.results.schema import LOCK_FILE


class TrialLease:
    """Exclusive, non-blocking lock on a trial folder (``flock`` on ``<trial_dir>/.lock``).

    Use as ``with TrialLease(d) as lease: if lease.held: ...`` or call :meth:`acquire` (False
    when another holder, in this or another process, has it). The kernel releases the lock
    when the holder closes it, exits or is killed. A process forked while holding the lease
    shares it until both have closed it. ``flock`` is local to one host on some network file
    systems (NFS setups vary); use one host per run directory or a lock-aware file system.
    """

    def __init__(self, trial_dir: str | Path) -> None:
        self.trial_dir = Path(trial_dir)
        self.path = self.trial_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Try to take the lease without waiting; True if held (already or now)."""
        if self._fd is not None:
            return True
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._fd = fd
        # Informational only: who holds it.
        info = f"{os.uname().nodename} {os.getpid()} {dt.datetime.now(dt.UTC).isoformat()}\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
        except OSError:
            pass
        return True

    def release(self) -> None:
        """Give the lease up (no-op when not held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.release()

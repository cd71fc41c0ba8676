"""The hidden staging folders of ``corpus prepare`` beside its corpus folder ``NAME``, and the
removal of those a killed run left behind.

A corpus is written into ``.NAME.tmp-<32 hex digits>`` and renamed to ``NAME``; a corpus it
replaces is first moved into another such folder, removed after. A run killed in between
leaves the folder. How a later run knows one is stale: while its writer lives, the folder
holds ``.lock``, a file on which the writer keeps an exclusive ``flock``. The kernel drops the
lock when the writer's process ends, however it ends (SIGKILL included), and the file gets the
name ``.lock`` only once locked, so a ``.lock`` that another process can lock belongs to a
writer that is gone: :func:`remove_stale` removes exactly those folders. A folder without
``.lock`` (an older rope_lab's; or one whose writer is between creating it and locking, or
handing it over) is left alone, as is one whose lock cannot be tried (a file system without
locks). ``flock`` is local to one host on some network file systems: there, a folder of a run
on another host may look stale; run ``corpus prepare`` for one folder on one host at a time.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rope_lab.runtime.atomic import fsync_dir

LOCK = ".lock"


def _prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


@contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A new hidden folder ``.NAME.tmp-<hex>`` beside ``out``, locked by this process while the
    block runs (its ``.lock``), removed when the block ends unless :func:`swap_in` renamed it
    into place."""
    folder = out.with_name(f"{_prefix(out)}{uuid.uuid4().hex}")
    folder.mkdir(parents=True)
    fd = None
    try:
        fd = os.open(folder / ".lock-new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{os.uname().nodename} {os.getpid()}\n".encode())
            os.rename(folder / ".lock-new", folder / LOCK)
        except OSError:
            pass  # no locks here: the folder is never judged stale
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # gone already once swapped in
        if fd is not None:
            os.close(fd)


def swap_in(folder: Path, out: Path) -> None:
    """Rename the finished staging ``folder`` (its lock file dropped) to ``out``; an old ``out``
    is moved into a staging folder of its own first and removed after, so ``out`` is at every
    moment absent, the old corpus or the new one."""
    for name in (LOCK, ".lock-new"):
        (folder / name).unlink(missing_ok=True)
    with staging(out) as trash:
        if out.exists():
            os.replace(out, trash / out.name)
        os.replace(folder, out)
        fsync_dir(out.parent)


def remove_stale(out: Path) -> list[Path]:
    """Remove the staging folders of ``out`` whose writer is gone (their ``.lock`` can be
    locked) and return them; every other file and folder is left as it is."""
    hexdigits = re.compile(r"[0-9a-f]{32}")
    prefix, removed = _prefix(out), list[Path]()
    if not out.parent.is_dir():
        return removed
    for entry in sorted(out.parent.iterdir()):
        if not entry.name.startswith(prefix) or not hexdigits.fullmatch(entry.name[len(prefix) :]):
            continue
        if entry.is_symlink() or not entry.is_dir():
            continue
        try:
            fd = os.open(entry / LOCK, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # no lock file: not judged
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live writer's (or locks unavailable)
        try:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        finally:
            os.close(fd)
    return removed

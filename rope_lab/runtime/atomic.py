"""Atomic file writes: a hidden temp file in the same folder, fsync, then `os.replace`.

Readers see either the old file or the complete new one; a crash leaves at most a hidden
`.NAME.*.tmp` file, which every reader of the results store ignores.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def fsync_dir(path: Path) -> None:
    """Flush a folder's entry table (best effort; some file systems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write `path` by calling `write(file)` on a hidden temp file, then renaming it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda f: f.write(text.encode()))


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A hidden temp folder beside `path` to fill; renamed to `path` when the block ends
    without an error, removed otherwise (`path` must not exist)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.mkdir()
    try:
        yield tmp
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(path.parent)

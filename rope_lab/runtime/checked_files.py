"""Files rope_lab reads, checked: a damaged file is named in one line, never a reader's traceback.

`CorruptFile` is a ConfigError, so `rope-lab` prints it as one `rope-lab: error:` line. The
readers of run directories (Parquet segments, `done.json`, NTK kernel archives), models and
checkpoints
(`rope_lab.trial.checkpoint`), Hugging Face safetensors (`rope_lab.hf.weights`) and corpora
(`rope_lab.corpus.meta`) raise it through `corrupt`, naming the path, what is wrong and how to
recover.

`proof` and `proof_problem` are the size and CRC-32 of a file as it was written: a finished
stage records them for each file it wrote (`rope_lab.trial.pipeline`), and a file missing or
changed since makes the stage unfinished, so a rerun recomputes it. Checksums are kept per
file version (path, size, mtime, inode) for the life of the process: a driver that asks about
one file several times reads it once.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from rope_lab.typed import ConfigError

RERUN = "delete it and rerun the sweep to recompute it"
_CHUNK = 1 << 20


class CorruptFile(ConfigError):
    """A file rope_lab cannot read as what it should be; the message names it, in one line."""


class FileChanged(UserWarning):
    """A recorded file missing or changed since it was written, named (`rope-lab` prints it as
    one `rope-lab: warning:` line)."""


def first_line(err: BaseException) -> str:
    """The first non-empty line of ``err``'s message (its type name when it has none)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def corrupt(
    path: str | Path,
    what: str,
    err: BaseException | None = None,
    *,
    hint: str | None = RERUN,
    error: type[Exception] = CorruptFile,
) -> Exception:
    """The one-line error ``"<path> <what>: <err's first line>; <hint>"`` (class ``error``)."""
    message = f"{path} {what}"
    if err is not None:
        message += f": {first_line(err)}"
    if hint:
        message += f"; {hint}"
    return error(message)


def rerun_hint(trial: str | Path) -> str:
    """How to recompute a damaged file of trial folder ``trial``: delete it and rerun the sweep;
    where the trial's ``_SUCCESS`` predates file records, delete that too (a rerun would skip
    the trial)."""
    marker = Path(trial) / "_SUCCESS"
    try:
        recorded = "files" in json.loads(marker.read_text())
    except (OSError, ValueError, TypeError):
        return RERUN
    return RERUN if recorded else f"delete it and {marker}, then rerun the sweep to recompute it"


def size_note(path: str | Path) -> str:
    """``"empty"``, ``"N bytes"`` or ``"missing"``: what is on disk at ``path``."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return "missing"
    return "empty" if size == 0 else f"{size} bytes"


def parquet_schema(path: str | Path, *, hint: str | None = RERUN) -> dict[str, Any]:
    """The column schema in ``path``'s Parquet footer (its metadata only, not its rows);
    CorruptFile naming the file when the footer cannot be read (a truncated or foreign file)."""
    import polars as pl

    try:
        return dict(pl.read_parquet_schema(path))
    except Exception as err:
        raise corrupt(
            path,
            f"is not a readable Parquet file (truncated? {size_note(path)})",
            err,
            hint=hint,
        ) from None


def read_parquet(
    path: str | Path, columns: list[str] | None = None, *, hint: str | None = RERUN
) -> Any:
    """The rows of Parquet file ``path`` (a polars DataFrame; ``columns`` only, when given);
    CorruptFile naming the file when its footer or its data cannot be read."""
    import polars as pl

    parquet_schema(path, hint=hint)
    try:
        return pl.read_parquet(path, columns=columns)
    except pl.exceptions.ColumnNotFoundError:
        raise
    except Exception as err:
        what = f"is not a readable Parquet file (damaged data, {size_note(path)})"
        raise corrupt(path, what, err, hint=hint) from None


def read_npz(path: str | Path, *, hint: str | None = RERUN) -> dict[str, Any]:
    """The arrays of NumPy archive ``path`` by name; CorruptFile naming the file when it
    cannot be read (a truncated or foreign file)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as err:
        what = f"is not a readable .npz file (truncated? {size_note(path)})"
        raise corrupt(path, what, err, hint=hint) from None


def read_json(
    path: str | Path, *, hint: str | None = RERUN, error: type[Exception] = CorruptFile
) -> Any:
    """The JSON value in ``path``; ``error`` naming the file when it is unreadable or not JSON."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise corrupt(path, "cannot be read", err, hint=hint, error=error) from None
    try:
        return json.loads(text)
    except ValueError as err:
        what = f"is not valid JSON ({size_note(path)})"
        raise corrupt(path, what, err, hint=hint, error=error) from None


_CRC_CACHE: dict[tuple[str, int, int, int], int] = {}


def _crc32(path: Path, st: os.stat_result) -> int:
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _CRC_CACHE:
        crc = 0
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
        _CRC_CACHE[key] = crc
    return _CRC_CACHE[key]


def proof(path: str | Path) -> dict[str, int]:
    """``{"bytes": size, "crc32": checksum}`` of the file at ``path`` as it is now."""
    path = Path(path)
    st = path.stat()
    return {"bytes": st.st_size, "crc32": _crc32(path, st)}


def proof_problem(path: str | Path, recorded: dict[str, Any]) -> str | None:
    """What differs between ``path`` and its ``recorded`` proof (missing, size, checksum), or
    None when it is the file that was recorded."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return "is missing"
    if st.st_size != recorded.get("bytes"):
        return f"is {st.st_size} bytes, {recorded.get('bytes')} when written"
    if "crc32" in recorded and _crc32(path, st) != recorded["crc32"]:
        return "has changed since it was written (checksum differs)"
    return None


__all__ = [
    "RERUN",
    "CorruptFile",
    "FileChanged",
    "corrupt",
    "first_line",
    "parquet_schema",
    "proof",
    "proof_problem",
    "read_json",
    "read_npz",
    "read_parquet",
    "rerun_hint",
    "size_note",
]

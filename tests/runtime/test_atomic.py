"""Atomic writes: private hidden temp files, old file kept on failure, durable rename, and
readers of the results store that never see a write in flight."""

import os
import re
import stat
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

from rope_lab.results import append_rows, load, read_trial_table, trial_dir
from rope_lab.runtime import atomic
from rope_lab.runtime.atomic import atomic_write, atomic_write_text


def _names(folder: Path) -> set[str]:
    """Names of the entries of `folder`."""
    return {p.name for p in folder.iterdir()}


def _is_temp_for(name: str, target: str) -> bool:
    """Whether `name` is a hidden `.TARGET.*.tmp` temp file of `target`."""
    return re.fullmatch(rf"\.{re.escape(target)}\..+\.tmp", name) is not None


def test_concurrent_writers_never_share_a_temp_file(tmp_path: Path) -> None:
    """Both writers hold their temp files open at once (the barrier), each its own."""
    path = tmp_path / "out" / "seg.parquet"
    barrier = threading.Barrier(2, timeout=5)
    temps: list[str] = []

    def writer(payload: bytes) -> Path:
        def write(f) -> None:
            temps.append(f.name)
            f.write(payload)
            barrier.wait()
            f.write(payload)

        return atomic_write(path, write)

    payloads = [b"a" * 1000, b"b" * 1000]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(writer, payloads)) == [path, path]
    assert len(set(temps)) == 2
    assert all(
        Path(t).parent == path.parent and _is_temp_for(Path(t).name, path.name) for t in temps
    )
    assert path.read_bytes() in [p * 2 for p in payloads]  # one whole write, not a mix
    assert _names(path.parent) == {path.name}


def test_leftover_temp_files_never_block_or_meet_a_later_write(tmp_path: Path) -> None:
    """Temp files of crashed writers (fixed-style, random and pid names) stay untouched."""
    path = tmp_path / "done.json"
    path.write_text("old")
    leftovers = {
        f".{path.name}.tmp",
        f".{path.name}.{uuid.uuid4().hex}.tmp",
        f".{path.name}.{os.getpid()}.tmp",
    }
    for name in leftovers:
        (tmp_path / name).write_bytes(b"partial")
    assert atomic_write_text(path, "new \u00e9") == path
    assert path.read_text(encoding="utf-8") == "new \u00e9"
    assert _names(tmp_path) == leftovers | {path.name}
    assert all((tmp_path / name).read_bytes() == b"partial" for name in leftovers)


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
@pytest.mark.parametrize("existing", [True, False])
def test_failed_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, error: BaseException, existing: bool
) -> None:
    path = tmp_path / "sub" / "model.eqx"
    if existing:
        path.parent.mkdir()
        path.write_bytes(b"old")
    seen = {}

    def write(f) -> None:
        f.write(b"new, partial")
        f.flush()
        seen["during"] = _names(path.parent)
        seen["target"] = path.read_bytes() if path.exists() else None
        raise error

    with pytest.raises(type(error)):
        atomic_write(path, write)
    (temp,) = seen["during"] - {path.name}  # the write went to a temp file only
    assert _is_temp_for(temp, path.name)
    assert seen["target"] == (b"old" if existing else None)
    assert _names(path.parent) == ({path.name} if existing else set())
    if existing:
        assert path.read_bytes() == b"old"


def test_data_is_synced_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.bin"
    payload = b"z" * 100  # less than a write buffer: only flush() hands it to the OS
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        events.append(("fsync", st.st_ino, st.st_size if stat.S_ISREG(st.st_mode) else None))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", os.stat(src).st_ino, Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic.os, "replace", replace)
    atomic_write(path, lambda f: f.write(payload))
    file_ino, dir_ino = path.stat().st_ino, tmp_path.stat().st_ino
    assert events == [
        ("fsync", file_ino, len(payload)),  # the whole payload reached the file first
        ("replace", file_ino, path),
        ("fsync", dir_ino, None),
    ]


EVAL_ROW = {
    "step": 1,
    "method": "none",
    "factor": 1.0,
    "finetune_steps": 0,
    "length": 8,
    "loss": 1.0,
    "perplexity": 2.718281828459045,
    "accuracy": 0.5,
    "exact_match": 0.0,
}


@pytest.mark.parametrize("table", ["eval", "train"])
def test_readers_skip_a_complete_segment_still_in_its_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """While a segment is written (valid Parquet, not yet renamed) readers see the old rows."""
    td = trial_dir(tmp_path, "t0")
    row = EVAL_ROW if table == "eval" else {"step": 1, "loss": 1.0}
    append_rows(td, table, [row], segment="a")
    real_write = pl.DataFrame.write_parquet
    seen = {}

    def write_then_read(self, file, *args, **kwargs):
        real_write(self, file, *args, **kwargs)
        file.flush()
        seen["names"] = _names(td / table)
        seen["load"] = load(tmp_path).table(table).collect().height
        seen["trial"] = read_trial_table(td, table).height

    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_then_read)
    append_rows(td, table, [row, row], segment="b")
    monkeypatch.undo()
    assert any(_is_temp_for(n, "b.parquet") for n in seen["names"])  # the write was in flight
    assert (seen["load"], seen["trial"]) == (1, 1)
    assert load(tmp_path).table(table).collect().height == 3
    assert read_trial_table(td, table).height == 3


def test_a_temp_file_that_cannot_be_created_raises_the_original_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the temp file is never created, the cleanup must not mask the real error with a
    FileNotFoundError of its own."""

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "open", refuse, raising=False)
    with pytest.raises(OSError, match="No space left") as err:
        atomic_write_text(tmp_path / "x.txt", "payload")
    assert not isinstance(err.value, FileNotFoundError)
    assert _names(tmp_path) == set()

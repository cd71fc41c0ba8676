"""Checked file reads: a damaged file is named in one line; proofs tell a changed file."""

import os
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from rope_lab.results import append_rows
from rope_lab.runtime.checked_files import (
    CorruptFile,
    parquet_schema,
    proof,
    proof_problem,
    read_json,
    read_npz,
    read_parquet,
)
from rope_lab.typed import ConfigError


def _segment(tmp_path: Path) -> Path:
    rows = [{"step": s, "loss": 1.0 / (s + 1)} for s in range(50)]
    return append_rows(tmp_path / "trials" / "t1", "train", rows, segment="train_00000050")


def _truncate(path: Path) -> int:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return len(data) // 2


def test_a_truncated_segment_is_named_in_one_line(tmp_path):
    path = _segment(tmp_path)
    assert "loss" in parquet_schema(path)
    half = _truncate(path)
    with pytest.raises(CorruptFile) as info:
        parquet_schema(path)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, ConfigError)
    assert re.fullmatch(
        rf"{re.escape(str(path))} is not a readable Parquet file \(truncated\? {half} bytes\): "
        r".+; delete it and rerun the sweep to recompute it",
        message,
    )


def test_an_empty_segment_says_empty_and_garbage_data_is_named_when_read(tmp_path):
    path = _segment(tmp_path)
    good = path.read_bytes()
    path.write_bytes(b"")
    with pytest.raises(CorruptFile, match=r"Parquet file \(truncated\? empty\)"):
        read_parquet(path)
    # footer intact, data pages garbled: the footer check passes, reading the rows names it
    garbled = bytearray(good)
    garbled[4:200] = bytes(196)
    path.write_bytes(bytes(garbled))
    with pytest.raises(CorruptFile, match=rf"^{re.escape(str(path))} is not a readable Parquet"):
        read_parquet(path)


def test_read_json_names_the_file(tmp_path):
    path = tmp_path / "done.json"
    path.write_text('{"status": "do')
    with pytest.raises(CorruptFile) as info:
        read_json(path, hint=None)
    assert re.fullmatch(
        rf"{re.escape(str(path))} is not valid JSON \(14 bytes\): Unterminated string .+",
        str(info.value),
    )
    path.write_text('{"status": "done"}')
    assert read_json(path) == {"status": "done"}


def test_proof_is_size_and_crc32_and_tells_each_change(tmp_path):
    path = tmp_path / "model.eqx"
    path.write_bytes(b"abcdef" * 1000)
    recorded = proof(path)
    assert recorded == {"bytes": 6000, "crc32": zlib.crc32(b"abcdef" * 1000)}
    assert proof_problem(path, recorded) is None
    path.write_bytes(b"abcdef" * 500)
    assert proof_problem(path, recorded) == "is 3000 bytes, 6000 when written"
    path.write_bytes(b"abcdeg" + b"abcdef" * 999)  # same size, other bytes
    os.utime(path, ns=(1, 1))  # a new file version even on a coarse-clock file system
    assert proof_problem(path, recorded) == "has changed since it was written (checksum differs)"
    path.unlink()
    assert proof_problem(path, recorded) == "is missing"


def test_a_truncated_npz_is_named_and_a_good_one_reads_back(tmp_path):
    path = tmp_path / "kernels_00000010.npz"
    np.savez(path, K_train=np.eye(3), K_cross=np.ones((2, 3)))
    arrays = read_npz(path)
    assert set(arrays) == {"K_train", "K_cross"} and np.array_equal(arrays["K_train"], np.eye(3))
    half = _truncate(path)
    with pytest.raises(CorruptFile) as info:
        read_npz(path, hint="delete the trial")
    assert re.fullmatch(
        rf"{re.escape(str(path))} is not a readable \.npz file \(truncated\? {half} bytes\): "
        r".+; delete the trial",
        str(info.value),
    )

"""Tests for rope_lab.corpus.staging: the staging folders a killed `corpus prepare` leaves are
removed by the next run; a live run's, an unlocked one and anything else are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np

from rope_lab.cli import main
from rope_lab.corpus import open_split
from rope_lab.corpus.staging import LOCK, staging

REPO = Path(__file__).resolve().parents[2]

# a prepare that SIGKILLs itself at `hook`: while encoding (the new corpus half written) or
# after the old corpus was moved aside (the new one in place)
KILLED = """
import os, signal, sys
from rope_lab.corpus import prepare, staging, tokenizers
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
module = {"encode": tokenizers, "fsync_dir": staging}[sys.argv[3]]
setattr(module, sys.argv[3], die)
prepare([sys.argv[1]], sys.argv[2], "bytes", progress=False, overwrite=True)
"""


def _killed_prepare(src: Path, out: Path, hook: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(src), str(out), hook], env=env, capture_output=True
    )
    assert done.returncode == -9, done.stderr.decode()


def _staged(parent: Path, name: str) -> set[str]:
    return {p.name for p in parent.iterdir() if p.name.startswith(f".{name}.tmp-")}


def test_a_killed_runs_folder_is_removed_and_nothing_else(tmp_path, capsys) -> None:
    """A prepare killed while writing leaves `.c.tmp-<hex>` (with its `.lock`); the next run
    removes it, says so on stderr, and leaves a live run's folder (locked by this process), a
    folder without `.lock`, a name that is not <32 hex digits> and another corpus' folder."""
    src = tmp_path / "text.txt"
    src.write_text("first section\n\nsecond section\n\nthird one")
    out = tmp_path / "c"
    _killed_prepare(src, out, "encode")
    (left,) = _staged(tmp_path, "c")
    assert (tmp_path / left / LOCK).is_file() and not out.exists()

    unlocked = tmp_path / f".c.tmp-{uuid.uuid4().hex}"
    unlocked.mkdir()
    (tmp_path / ".c.tmp-notes").mkdir()
    other = tmp_path / f".d.tmp-{uuid.uuid4().hex}"
    other.mkdir()
    (other / LOCK).write_text("")
    with staging(out) as live:
        argv = ["corpus", "prepare", str(src), "--out", str(out), "--tokenizer", "bytes"]
        assert main([*argv, "--quiet"]) == 0
        assert _staged(tmp_path, "c") == {live.name, unlocked.name, ".c.tmp-notes"}
        assert live.is_dir() and other.is_dir()
    assert capsys.readouterr().err == (
        f"removed {tmp_path / left}: the staging folder of a killed corpus prepare\n"
    )
    want = b"first section\n\nsecond section\n\n"
    np.testing.assert_array_equal(open_split(out, "train"), np.frombuffer(want, np.uint8))
    assert main([*argv, "--quiet"]) == 0  # nothing stale now: nothing removed, nothing said
    assert capsys.readouterr().err == ""


def test_a_run_killed_while_swapping_leaves_the_old_corpus_to_remove(tmp_path) -> None:
    """Killed after moving the old corpus aside and renaming the new one into place: the new
    corpus is whole, the old one sits in a staging folder that the next run removes."""
    src = tmp_path / "text.txt"
    src.write_text("alpha\n\nbeta\n\ngamma")
    out = tmp_path / "c"
    argv = ["corpus", "prepare", str(src), "--out", str(out), "--tokenizer", "bytes", "--quiet"]
    assert main(argv) == 0
    src.write_text("delta\n\nepsilon\n\nzeta")
    _killed_prepare(src, out, "fsync_dir")
    (trash,) = _staged(tmp_path, "c")
    assert (tmp_path / trash / "c" / "meta.json").is_file()  # the old corpus
    want = np.frombuffer(b"delta\n\nepsilon\n\n", np.uint8)
    np.testing.assert_array_equal(open_split(out, "train"), want)
    assert main(argv) == 0
    assert _staged(tmp_path, "c") == set()

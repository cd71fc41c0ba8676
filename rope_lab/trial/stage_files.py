"""The files each stage of a trial writes, and their proofs in `done.json`.

A finished stage records the size and CRC-32 (`rope_lab.runtime.checked_files.proof`) of each
file it wrote under `files` in its `done.json` (`rope_lab.trial.pipeline`): the train stage its
model.eqx and its train / NTK-step segments, every other stage its eval (and ntk) segment. A
file missing or changed since makes the stage unfinished, so a rerun recomputes it
(`unproven_files`; a `StageRecomputed` warning names the file). A `done.json` without the record
(written before stages kept one) is trusted while the file later stages read is there: a
finished train stage's model.eqx, another stage's eval segment. A stage segment moved to
`superseded/` (a later spec does not ask for its stage) still counts.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path

from rope_lab.runtime.checked_files import FileChanged, proof, proof_problem
from rope_lab.trial.stage_plan import TRAIN

MODEL_FILE = "model.eqx"
SUPERSEDED_DIR = "superseded"  # rows of finished stages the latest spec does not ask for
STAGE_TABLES = ("eval", "ntk")  # tables with one segment per evaluation stage
FILES_KEY = "files"  # done.json / _SUCCESS: {relative path: size and CRC-32} of files written
_STEP_TABLES = ("train", "ntk")  # the train stage's per-step segments: <table>_<step>.parquet


class StageRecomputed(FileChanged):
    """A stage whose `done.json` no longer proves its files: not finished, a rerun recomputes
    it."""


def stage_files(folder: Path, stage: str) -> list[Path]:
    """The files of trial folder `folder` that stage `stage` writes and that exist now: the
    train stage's model.eqx, train and NTK-step segments; another stage's eval / ntk segment."""
    if stage == TRAIN:
        found = [folder / MODEL_FILE, *sorted((folder / "train").glob("train_*.parquet"))]
        found += sorted((folder / "ntk").glob("ntk_*.parquet"))
    else:
        found = [folder / table / f"{stage}.parquet" for table in STAGE_TABLES]
    return [path for path in found if path.is_file()]


def file_proofs(folder: Path, paths: Sequence[Path]) -> dict[str, dict[str, int]]:
    """`{path relative to folder: its size and CRC-32}` (`checked_files.proof`)."""
    return {path.relative_to(folder).as_posix(): proof(path) for path in paths}


def broken_files(folder: Path, proofs: dict[str, dict[str, int]]) -> list[str]:
    """`"<path> <what differs>"` for each file of `proofs` (relative to trial folder `folder`)
    missing or changed since; a stage segment found in `superseded/` counts as present."""
    out = []
    for rel, recorded in proofs.items():
        path = folder / rel
        if not path.exists() and (folder / SUPERSEDED_DIR / rel).exists():
            path = folder / SUPERSEDED_DIR / rel
        problem = proof_problem(path, recorded)
        if problem is not None:
            out.append(f"{path} {problem}")
    return out


_WARNED: set[str] = set()


def warn_recomputed(what: str) -> None:
    """The StageRecomputed warning `"<what> is not finished (a rerun recomputes it)"`, once per
    process for each message (the driver asks about a stage several times; libraries that reset
    the warning filters defeat Python's own once)."""
    message = f"{what} is not finished (a rerun recomputes it)"
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, StageRecomputed, stacklevel=3)


def unproven_files(folder: Path, stage: str, done: dict) -> list[str]:
    """What is wrong with the files that `done.json` `done` of `stage` (in trial folder `folder`)
    proves (`broken_files`); for a record-free `done.json`, only whether the file later stages
    read is gone."""
    if FILES_KEY in done:
        return broken_files(folder, done[FILES_KEY] or {})
    if stage == TRAIN and done.get("status") != "done":
        return []
    rel = MODEL_FILE if stage == TRAIN else f"eval/{stage}.parquet"
    if (folder / rel).exists() or (folder / SUPERSEDED_DIR / rel).exists():
        return []
    return [f"{folder / rel} is missing"]


def rewind_checkpoints(folder: Path, done: dict) -> None:
    """Before a train stage runs again for a broken train / NTK-step segment: drop the
    checkpoints from that step on, so training resumes before it and rewrites it (a later
    checkpoint would resume past it)."""
    steps = [
        int(Path(rel).stem.split("_")[-1])
        for rel in done.get(FILES_KEY) or {}
        if Path(rel).parent.name in _STEP_TABLES
        and broken_files(folder, {rel: done[FILES_KEY][rel]})
    ]
    if not steps:
        return
    for ckpt in (folder / "checkpoints").glob("*"):
        if ckpt.name.isdigit() and int(ckpt.name) >= min(steps):
            shutil.rmtree(ckpt)


__all__ = [
    "FILES_KEY",
    "MODEL_FILE",
    "STAGE_TABLES",
    "SUPERSEDED_DIR",
    "StageRecomputed",
    "broken_files",
    "file_proofs",
    "rewind_checkpoints",
    "stage_files",
    "unproven_files",
    "warn_recomputed",
]

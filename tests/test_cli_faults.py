"""The standing fault suite: bad inputs and damaged files, command by command.

Each fault writes a small workspace into a temporary folder and runs one `rope-lab` command on
it in-process. The command must refuse with exit code 1 and exactly one stderr line,
`rope-lab: error: ...`, holding the words the fault names (so the user learns which file or key
is wrong and what to do), and must leave the workspace byte for byte as it was: a refused
command changes, creates and deletes nothing. A new bad input found in the field becomes a row
of `FAULTS`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rope_lab.cli import main
from rope_lab.config import to_dict
from tests.analysis.claims.test_cli import write_store
from tests.helpers import tiny_trial
from tests.sweep.conftest import write_spec


@dataclass(frozen=True)
class Fault:
    """One bad input: `setup(workspace)` writes it and returns the command line; `says` are
    fragments of the one error line (`{ws}` stands for the workspace path)."""

    name: str
    setup: Callable[[Path], list[str]]
    says: tuple[str, ...]


def _trial_yaml(ws: Path, text: str | None = None, **changes) -> Path:
    path = ws / "trial.yaml"
    if text is None:
        cfg = to_dict(tiny_trial("rope", steps=5))
        for dotted, value in changes.items():
            node = cfg
            *parents, last = dotted.split(".")
            for key in parents:
                node = node[key]
            node[last] = value
        text = yaml.safe_dump(cfg)
    path.write_text(text)
    return path


def _user_folder(ws: Path, name: str = "mine") -> Path:
    folder = ws / name
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("a user's notes\n")
    (folder / "sub" / "data.txt").write_text("1 2 3\n")
    return folder


def _texts(ws: Path) -> Path:
    src = ws / "texts"
    src.mkdir()
    for i in range(3):
        (src / f"doc{i}.txt").write_text(f"document {i}: " + "some words here. " * 20)
    return src


def _empty_run(ws: Path) -> Path:
    (ws / "run" / "trials").mkdir(parents=True)
    return ws / "run"


def _damaged_run(ws: Path) -> Path:
    """A run directory of hand-written rows whose one eval segment lost its last 8 bytes."""
    run = write_store(ws / "run")
    segment = run / "trials" / "alibi-s1" / "eval" / "eval.parquet"
    segment.write_bytes(segment.read_bytes()[:-8])
    return run


def _prepare(ws: Path, out: Path | str) -> list[str]:
    return ["corpus", "prepare", str(_texts(ws)), "--tokenizer", "bytes", "--out", str(out)]


# The commands that read run directories.
READERS = (
    ["results"],
    ["claims"],
    ["loss-law"],
    ["loss-law", "--by-ratio"],
    ["isoflop"],
    ["plot", "extrapolation"],
)

FAULTS = [
    Fault(
        "train: a misspelt key",
        lambda ws: ["train", str(_trial_yaml(ws, **{"model.widht": 64}))],
        ("trial.yaml: model.widht: unknown key 'widht'", "did you mean 'width'"),
    ),
    Fault(
        "train: a key given twice",
        lambda ws: ["train", str(_trial_yaml(ws, "train:\n  lr: 0.1\n  lr: 0.2\n"))],
        ("trial.yaml: line 3: duplicate key 'lr' (first at line 2)",),
    ),
    Fault(
        "train: a config file that does not exist",
        lambda ws: ["train", str(ws / "nothing.yaml")],
        ("nothing.yaml: cannot read YAML", "No such file"),
    ),
    Fault(
        "train: a learning rate that is not a number",
        lambda ws: ["train", str(_trial_yaml(ws, "train:\n  lr: .nan\n"))],
        ("trial.yaml", "train.lr: expected a finite number, got nan"),
    ),
    Fault(
        "train: a rope block under another encoding",
        lambda ws: [
            "train",
            str(_trial_yaml(ws, "model:\n  position:\n    kind: alibi\n    rope: {theta: 500}\n")),
        ],
        ("model.position.rope: not used", "'alibi'"),
    ),
    Fault(
        "train: --out holds a user's files",
        lambda ws: ["train", str(_trial_yaml(ws)), "--out", str(_user_folder(ws))],
        ("--out:", "mine holds notes.txt, sub/", "not a run directory"),
    ),
    Fault(
        "sweep run: the run folder holds a user's files",
        lambda ws: [
            "sweep",
            "run",
            str(write_spec(ws)),
            "--out",
            str(_user_folder(ws / "runs", "tiny").parent),
        ],
        ("--out:", "tiny holds notes.txt, sub/", "not a run directory"),
    ),
    Fault(
        "sweep plan: a scaling block no trial can use",
        lambda ws: ["sweep", "plan", str(write_spec(ws, grid={"model.position.kind": ["alibi"]}))],
        ("scaling: used by no trial",),
    ),
    Fault(
        "sweep plan: an unknown grid key",
        lambda ws: ["sweep", "plan", str(write_spec(ws, grid={"model.widht": [32]}))],
        ("grid.model.widht", "did you mean 'model.width'"),
    ),
    Fault(
        "sweep plan: an unknown encoding",
        lambda ws: ["sweep", "plan", str(write_spec(ws, grid={"model.position.kind": ["rop"]}))],
        ("rop", "rope"),
    ),
    Fault(
        "sweep run: a bad spec starts nothing",
        lambda ws: [
            "sweep",
            "run",
            str(write_spec(ws, grid={"model.widht": [32]})),
            "--out",
            str(ws / "runs"),
        ],
        ("grid.model.widht",),
    ),
    Fault(
        "corpus prepare: --out is the source folder",
        lambda ws: _prepare(ws, ws / "texts"),
        ("--out", "texts"),
    ),
    Fault(
        "corpus prepare: --out holds a user's files",
        lambda ws: _prepare(ws, _user_folder(ws)),
        ("--out", "mine"),
    ),
    Fault(
        "corpus prepare: --out is a regular file",
        lambda ws: _prepare(ws, _user_folder(ws) / "notes.txt"),
        ("--out", "notes.txt"),
    ),
    Fault(
        "corpus prepare: --out inside a source",
        lambda ws: _prepare(ws, ws / "texts" / "corpus"),
        ("--out", "texts"),
    ),
    Fault(
        "reference-vectors: --out holds a user's files",
        lambda ws: ["reference-vectors", "--out", str(_user_folder(ws))],
        ("mine: not empty", "--overwrite"),
    ),
    Fault(
        "sweep status: a path that does not exist",
        lambda ws: ["sweep", "status", str(ws / "nothing")],
        ("not a run directory (no such directory)", "nothing"),
    ),
    Fault(
        "claims: a run directory without trials",
        lambda ws: ["claims", str(_empty_run(ws))],
        ("no trials in", "nothing to judge"),
    ),
    *(
        Fault(
            f"{' '.join(cmd)}: a truncated results segment",
            lambda ws, cmd=cmd: [*cmd, str(_damaged_run(ws))],
            ("alibi-s1/eval/eval.parquet is not a readable Parquet file", "rerun the sweep"),
        )
        for cmd in READERS
    ),
    *(
        Fault(
            f"{cmd[0]}: {option} inside the results it reads",
            lambda ws, cmd=cmd, option=option: [
                *cmd,
                str(write_store(ws / "run")),
                option,
                str(ws / "run" / "trials" / "alibi-s1" / "eval" / "eval.parquet"),
            ],
            (f"{option}:", "is inside", "the results this command reads"),
        )
        for cmd, option in zip(READERS, ("--output",) * 5 + ("--out",), strict=True)
    ),
    Fault(
        "results: --output is a folder",
        lambda ws: ["results", str(write_store(ws / "run")), "--output", str(_user_folder(ws))],
        ("--output:", "mine is a folder"),
    ),
    *(
        Fault(
            f"{' '.join(cmd)}: not a run directory",
            lambda ws, cmd=cmd: [*cmd, str(_user_folder(ws))],
            ("not a run directory", "mine holds notes.txt"),
        )
        for cmd in READERS
    ),
]


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with a hash of its bytes (folders as "dir")."""

    def digest(p: Path) -> str:
        return "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()

    return {str(p.relative_to(root)): digest(p) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_a_bad_input_is_one_line_and_changes_nothing(fault: Fault, tmp_path, capsys) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    argv = fault.setup(ws)
    before = _snapshot(ws)
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("rope-lab: error: "), err
    for words in fault.says:
        assert words.format(ws=ws) in lines[0], (words, lines[0])
    assert _snapshot(ws) == before


def test_the_snapshot_sees_a_changed_byte_a_new_file_and_a_removed_one(tmp_path) -> None:
    """The suite's own instrument: any change to the workspace shows in the snapshot."""
    folder = _user_folder(tmp_path)
    before = _snapshot(tmp_path)
    (folder / "notes.txt").write_text("a user's notes!\n")
    assert _snapshot(tmp_path) != before
    (folder / "notes.txt").write_text("a user's notes\n")
    assert _snapshot(tmp_path) == before
    (folder / "sub" / "new").mkdir()
    assert _snapshot(tmp_path) != before
    (folder / "sub" / "new").rmdir()
    (folder / "sub" / "data.txt").unlink()
    assert _snapshot(tmp_path) != before


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keep=st.floats(0.0, 0.999), command=st.sampled_from(["results", "claims", "loss-law"]))
def test_a_segment_cut_anywhere_is_named_in_one_line(keep, command, tmp_path_factory, capsys):
    """Whatever prefix of a segment's bytes survives, the commands that read it name it."""
    ws = tmp_path_factory.mktemp("ws")
    run = write_store(ws / "run")
    segment = run / "trials" / "rope-s0" / "eval" / "eval.parquet"
    data = segment.read_bytes()
    segment.write_bytes(data[: int(keep * len(data))])
    before = _snapshot(ws)
    capsys.readouterr()
    assert main([command, str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"rope-lab: error: {segment} is not a readable")
    assert _snapshot(ws) == before

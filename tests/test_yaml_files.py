"""Strict YAML: a key given twice in one mapping is refused naming the file, the key and both
lines, instead of the last value silently winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from rope_lab.cli import main
from rope_lab.config import ConfigError, load_trial
from rope_lab.sweep.spec import load_spec
from rope_lab.yaml_files import read_yaml

SPEC = """name: twice
base:
  model: {depth: 1, width: 32, head_dim: 8}
  train: {length: 16, steps: 2}
grid:
  model.position.kind: [rope, alibi]
grid:
  model.width: [32, 64]
"""


def test_a_key_given_twice_is_refused_naming_file_key_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(SPEC)
    with pytest.raises(
        ConfigError, match=r"twice\.yaml: line 7: duplicate key 'grid' \(first at line 5\)$"
    ):
        load_spec(path)
    nested = tmp_path / "trial.yaml"
    nested.write_text("model:\n  width: 32\n  depth: 1\n  width: 64\n")
    with pytest.raises(
        ConfigError, match=r"trial\.yaml: line 4: duplicate key 'width' \(first at line 2\)"
    ):
        load_trial(nested)
    flow = tmp_path / "flow.yaml"
    flow.write_text("train: {steps: 2, steps: 3}\n")
    with pytest.raises(ConfigError, match=r"line 1: duplicate key 'steps'"):
        read_yaml(flow)


def test_the_cli_prints_one_line_and_runs_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(SPEC)
    assert main(["sweep", "run", str(path), "--out", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "duplicate key 'grid'" in err
    assert not (tmp_path / "runs").exists()


def test_plain_yaml_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("a: 1\nb: {c: [1, 2], d: null}\nlist:\n  - {x: 1}\n  - {x: 1}\n")
    assert read_yaml(path) == {"a": 1, "b": {"c": [1, 2], "d": None}, "list": [{"x": 1}, {"x": 1}]}
    (tmp_path / "empty.yaml").write_text("")
    assert read_yaml(tmp_path / "empty.yaml") is None
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read YAML"):
        read_yaml(tmp_path / "missing.yaml")

"""The command line: help, clean config errors, one real tiny trial."""

import subprocess
import sys

import yaml

from rope_lab.cli import main
from rope_lab.config import to_dict
from tests.helpers import tiny_trial


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "rope_lab.cli", *args], capture_output=True, text=True, timeout=600
    )


def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0 and "train" in out.stdout
    out = run_cli("train", "--help")
    assert "--out" in out.stdout


def test_bad_config_is_one_line_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"model": {"widht": 64}}))
    out = run_cli("train", str(path))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "bad.yaml: model.widht: unknown key 'widht' (did you mean 'width'?)" in out.stderr


def test_train_tiny_trial_prints_table(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(to_dict(tiny_trial("rope", steps=10))))
    assert main(["train", str(path)]) == 0
    out = capsys.readouterr().out
    assert "accuracy by evaluation length" in out and "dynamic" in out and "status done" in out

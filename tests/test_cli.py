"""The command line: help, clean config errors, one real tiny trial."""

import subprocess
import sys

import pytest
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


@pytest.mark.slow  # ~19 s
def test_train_tiny_trial_prints_table(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(to_dict(tiny_trial("rope", steps=10))))
    assert main(["train", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "accuracy by evaluation length" in out and "dynamic" in out and "status done" in out
    from rope_lab.results import load

    res = load(tmp_path / "out")
    assert res.trials.collect()["status"].to_list() == ["done"]
    assert res.train.collect().height == 2  # steps 5 and 10
    assert set(res.eval.collect()["method"]) == {"default", "linear", "dynamic"}


@pytest.mark.slow
def test_train_prints_bits_per_byte_beside_the_loss_of_a_text_model(tmp_path, capsys):
    """A byte-level model's table in bits per byte is its loss table / ln 2, cell by cell."""
    import math

    from rope_lab.config import replace

    trial = tiny_trial("alibi", steps=5, task="lm_text", vocab=256)
    trial = replace(
        trial,
        **{"task.params": (("path", "builtin:python-docs"),), "eval.methods": (),
           "eval.factors": (), "ntk.enabled": False},
    )  # fmt: skip
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(to_dict(trial)))
    assert main(["train", str(path)]) == 0
    out = capsys.readouterr().out

    def table(metric):
        lines = out[out.index(f"{metric} by evaluation length") :].splitlines()
        return [float(v) for v in lines[3].split()[3:]]  # the model as trained, by length

    loss, bpb = table("loss"), table("bits_per_byte")
    assert len(loss) == len(bpb) == 3
    # both printed to 3 decimals: each rounding moves a cell by at most 5e-4
    for b, v in zip(bpb, loss, strict=True):
        assert abs(b - v / math.log(2)) <= 5e-4 * (1 + 1 / math.log(2))


def test_sweep_plan_status_and_bad_spec(tmp_path):
    from tests.sweep.conftest import write_spec

    spec = write_spec(tmp_path)
    out = run_cli("sweep", "plan", str(spec))
    assert out.returncode == 0, out.stderr
    assert "passkey-rope-w32" in out.stdout and "passkey-alibi-w32" in out.stdout
    assert "total" in out.stdout.lower()
    # a path that is not a run directory: the one line `rope-lab results` prints
    for command in ("sweep", "status"), ("results",):
        out = run_cli(*command, str(tmp_path / "nothing"))
        assert (out.returncode, out.stdout) == (1, "")
        assert out.stderr == (
            f"rope-lab: error: not a run directory (no such directory): {tmp_path / 'nothing'}\n"
        )
    bad = write_spec(tmp_path, grid={"model.widht": [32]})
    out = run_cli("sweep", "run", str(bad), "--out", str(tmp_path / "runs"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "grid.model.widht" in out.stderr and "did you mean 'model.width'" in out.stderr
    assert not (tmp_path / "runs").exists()  # rejected before any work started


def test_sweep_run_names_failures_and_the_run_directory(tmp_path, monkeypatch, capsys):
    """The end of `sweep run`: each failed trial's exception line and traceback file, each
    diverged trial, the counts, and the run directory to pass to `results` / `plot`."""
    from rope_lab.sweep.spec import load_spec
    from rope_lab.trial import stage_work
    from tests.sweep.conftest import write_spec

    spec_path = write_spec(tmp_path)
    rope, alibi = load_spec(spec_path).trials

    def train(cfg, run_dir):
        if cfg.model.position.kind == "rope":
            raise ValueError("lm_text: the corpus shrank")
        return {"status": "diverged", "n_params": 1, "tokens_seen": 0}

    monkeypatch.setattr(stage_work, "train_stage", train)
    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    out = tmp_path / "runs"
    code = main(["sweep", "run", str(spec_path), "--out", str(out), "--runner", "serial",
                 "--no-plots"])  # fmt: skip
    assert code == 1
    text = capsys.readouterr().out
    run_dir = out / "tiny"
    error_file = run_dir / "trials" / rope.trial_id / "error.txt"
    assert "Traceback" in error_file.read_text()
    tail = text[text.index("failed or diverged trials:") :].splitlines()
    assert tail == [
        "failed or diverged trials:",
        f"  diverged  {alibi.trial_id}: non-finite training loss (a result; no traceback)",
        f"  failed    {rope.trial_id}: ValueError: lm_text: the corpus shrank",
        f"            traceback: {error_file}",
        "",
        "0 done, 1 diverged, 1 failed, 0 skipped (already finished), 0 busy (held by another "
        "driver); " + tail[5].split("; ")[-1],
        f"run directory: {run_dir}",
        f"  rope-lab results {run_dir}",
        f"  rope-lab plot extrapolation {run_dir}",
        f"  rope-lab sweep status {run_dir}",
    ]
    assert tail[5].split("; ")[-1].startswith("wall ")
    # what it names loads: the run directory, and its parent (--out) too
    assert main(["results", str(run_dir), "--table", "trials"]) == 0
    assert main(["results", str(out), "--table", "trials", "--format", "csv"]) == 0
    assert capsys.readouterr().out.count("tiny") >= 2


def _actions(parser):
    """Every argument of the `rope-lab` parser and its subcommands, as (command, action)."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for command, inner in _actions(sub):
                    yield f"{name} {command}".strip(), inner
        else:
            yield "", action


def test_no_number_argument_is_read_without_a_range_check():
    from rope_lab import cli_args
    from rope_lab.cli import build_parser

    actions = list(_actions(build_parser()))
    checked = {f"{c} {a.option_strings[0]}": a.type.__name__ for c, a in actions
               if getattr(a.type, "__module__", None) == cli_args.__name__}  # fmt: skip
    assert not [(c, a.dest) for c, a in actions if a.type in (int, float)]
    assert checked == {
        "sweep plan --flops": "positive_float",
        "results --limit": "non_negative_int",
        "loss-law --length-ratio": "positive_float",
        "loss-law --n-boot": "non_negative_int",
        "loss-law --law-boot": "non_negative_int",
        "isoflop --n-boot": "non_negative_int",
        "lr-transfer --n-boot": "non_negative_int",
        "claims --min-seeds": "positive_int",
        "claims --n-boot": "positive_int",
        "corpus prepare --eval-fraction": "fraction",
        "coord-check --steps": "positive_int",
    }


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["claims", "r", "--min-seeds", "0"],
         "argument --min-seeds: must be an integer >= 1, got '0'"),
        (["claims", "r", "--min-seeds", "-2"],
         "argument --min-seeds: must be an integer >= 1, got '-2'"),
        (["claims", "r", "--n-boot", "1.5"],
         "argument --n-boot: must be an integer >= 1, got '1.5'"),
        (["results", "r", "--limit", "-1"], "argument --limit: must be an integer >= 0, got '-1'"),
        (["loss-law", "r", "--n-boot", "-3"],
         "argument --n-boot: must be an integer >= 0, got '-3'"),
        (["isoflop", "r", "--n-boot", "-1"],
         "argument --n-boot: must be an integer >= 0, got '-1'"),
        (["loss-law", "r", "--length-ratio", "0"],
         "argument --length-ratio: must be a finite number > 0, got '0'"),
        (["sweep", "plan", "s.yaml", "--flops", "nan"],
         "argument --flops: must be a finite number > 0, got 'nan'"),
        (["sweep", "plan", "s.yaml", "--flops", "inf"],
         "argument --flops: must be a finite number > 0, got 'inf'"),
        (["corpus", "prepare", "a", "--out", "o", "--tokenizer", "bytes", "--eval-fraction", "1"],
         "argument --eval-fraction: must be a number in (0, 1), got '1'"),
    ],
)  # fmt: skip
def test_a_number_out_of_range_stops_the_parse_naming_the_option(argv, error, capsys):
    from rope_lab.cli import build_parser

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {error}")


def test_numbers_in_range_parse_to_their_values():
    from rope_lab.cli import build_parser

    args = build_parser().parse_args(["claims", "r", "--min-seeds", "1", "--n-boot", "5"])
    assert (args.min_seeds, args.n_boot) == (1, 5)
    args = build_parser().parse_args(["results", "r", "--limit", "0"])
    assert args.limit == 0
    args = build_parser().parse_args(["sweep", "plan", "s.yaml", "--flops", "1e9"])
    assert args.flops == 1e9


def test_sweep_run_prints_the_plans_warnings_before_it_starts(tmp_path, monkeypatch, capsys):
    from rope_lab.sweep import runner
    from tests.sweep.conftest import write_spec

    spec_path = write_spec(tmp_path, scaling={"methods": ["linear"], "factors": [2]})

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_sweep", stop)
    assert main(["sweep", "run", str(spec_path), "--out", str(tmp_path / "runs")]) == 130
    assert capsys.readouterr().out.splitlines()[0] == (
        "warning: scaling: skipped by 1 of 2 trials, because there are no RoPE scalings under "
        "model.position.kind 'alibi' (1)"
    )


def test_a_changed_file_warning_is_one_line():
    import warnings

    from rope_lab.cli import _file_warnings_in_one_line
    from rope_lab.trial.pipeline import StageRecomputed

    _file_warnings_in_one_line()
    text = "RUN/trials/T/model.eqx is missing: stage train is not finished"
    line = warnings.formatwarning(StageRecomputed(text), StageRecomputed, "pipeline.py", 9)
    assert line == f"rope-lab: warning: {text}\n"
    other = warnings.formatwarning(UserWarning("x"), UserWarning, "a.py", 3)
    assert other.startswith("a.py:3: UserWarning: x")

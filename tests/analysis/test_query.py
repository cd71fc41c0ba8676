"""Queries on a small hand-made results store with known answers, and `rope-lab results`."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rope_lab import cli_analysis
from rope_lab.analysis import query as q
from rope_lab.results import append_rows, trial_dir, write_trial_row

L = 10  # train.length of every trial
LENGTHS = (5, 10, 20, 40)
# (accuracy, loss) by length, per trial and (method, factor)
CURVES = {
    ("rope-s0", "default", 1.0): ([1.0, 0.9, 0.85, 0.5], [0.1, 0.2, 0.3, 0.8]),
    ("rope-s0", "linear", 2.0): ([0.9, 0.9, 0.7, 0.9], [0.2, 0.2, 0.5, 0.25]),
    ("rope-s1", "default", 1.0): ([1.0, 0.8, 0.6, 0.4], [0.1, 0.4, 0.6, 1.0]),
    ("rope-s1", "linear", 2.0): ([0.8, 0.8, 0.8, 0.8], [0.3, 0.3, 0.3, 0.3]),
    ("alibi-s0", "none", 1.0): ([1.0, 1.0, 0.95, 0.92], [0.05, 0.1, 0.1, 0.4]),
}
CONFIG: dict[str, dict[str, Any]] = {
    "rope-s0": {"model.position.kind": "rope", "model.width": 32, "train.seed": 0},
    "rope-s1": {"model.position.kind": "rope", "model.width": 32, "train.seed": 1},
    "alibi-s0": {"model.position.kind": "alibi", "model.width": 64, "train.seed": 0},
}


def make_store(run: Path) -> Path:
    """3 trials: rope x 2 seeds (as trained + linear x2), alibi x 1 seed; ntk rows."""
    for tid, cfg in CONFIG.items():
        d = trial_dir(run, tid)
        config = {
            **cfg,
            "model.position.rope.scaling": "default",
            "model.position.rope.factor": 1.0,
            "train.length": L,
            "task.name": "copy",
        }
        write_trial_row(d, {"status": "done", "wall_time_s": 1.0 + cfg["train.seed"]}, config)
        for (t, method, factor), (acc, loss) in CURVES.items():
            if t != tid:
                continue
            rows = [
                {"step": 100, "method": method, "factor": factor, "finetune_steps": 0,
                 "length": n, "accuracy": a, "loss": lo, "perplexity": math.exp(lo)}
                for n, a, lo in zip(LENGTHS, acc, loss, strict=True)
            ]  # fmt: skip
            rows.append({**rows[-1], "position_bucket": 0, "loss": 9.0})
            append_rows(d, "eval", rows, segment=f"eval_{method}")
        ntk = [
            {"step": s, "probe_length": p, "group": "total", "metric": "distance_from_init",
             "value": s * (1 + cfg["train.seed"]) + p / 1000, "method": "none", "factor": 1.0}
            for s in (0, 50, 100)
            for p in (L, 2 * L)
        ]  # fmt: skip
        append_rows(d, "ntk", ntk, segment="ntk")
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("query") / "run")


def test_eval_table_join_ratio_and_label(run: Path) -> None:
    e = q.eval_table(run)
    assert e.height == len(CURVES) * len(LENGTHS)  # bucket rows left out
    assert e.get_column("position_bucket").null_count() == e.height
    row = e.filter(pl.col("trial_id") == "alibi-s0", pl.col("length") == 40).row(0, named=True)
    assert row["model.width"] == 64 and row["train.length"] == L and row["status"] == "done"
    assert row["length_ratio"] == 4.0
    labels = (
        e.group_by("trial_id", "method").agg(pl.col("label").first()).sort("trial_id", "method")
    )
    expected = ["alibi", "rope", "rope/linear x2", "rope", "rope/linear x2"]
    assert labels.get_column("label").to_list() == expected
    assert q.eval_table(run, whole_sequence=False).height == e.height + len(CURVES)


def test_several_run_dirs(run: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    d = trial_dir(other, "x-s0")
    write_trial_row(d, {"status": "done"}, {"model.position.kind": "none", "train.length": L})
    append_rows(d, "eval", [{"step": 1, "method": "none", "factor": 1.0, "length": L}], segment="e")
    e = q.eval_table([run, str(other)])
    assert e.height == len(CURVES) * len(LENGTHS) + 1
    assert set(e.get_column("trial_id")) == {*CONFIG, "x-s0"}


def test_aggregate_seeds_default_grouping(run: Path) -> None:
    e = q.eval_table(run)
    agg = q.aggregate_seeds(e, metric="accuracy")
    # rope: 2 methods x 4 lengths over 2 seeds; alibi: 4 lengths, 1 seed
    assert agg.height == 2 * 4 + 4
    assert "train.seed" not in agg.columns and "trial_id" not in agg.columns
    assert "wall_time_s" not in agg.columns  # per-run bookkeeping is not a key
    r = agg.filter(pl.col("label") == "rope", pl.col("length") == 20).row(0, named=True)
    assert r["n"] == 2
    assert r["mean"] == pytest.approx(0.725)
    se = math.sqrt(((0.85 - 0.725) ** 2 + (0.6 - 0.725) ** 2) / 1) / math.sqrt(2)
    assert r["se"] == pytest.approx(se)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((0.725 - se, 0.725 + se))
    single = agg.filter(pl.col("label") == "alibi", pl.col("length") == 40).row(0, named=True)
    assert single["n"] == 1 and single["mean"] == pytest.approx(0.92)
    assert single["se"] is None and single["ci_low"] is None


def test_aggregate_seeds_by_and_intervals(run: Path) -> None:
    e = q.eval_table(run).filter(pl.col("model.position.kind") == "rope")
    se = q.aggregate_seeds(e, ["method", "length"], "loss")
    boot = q.aggregate_seeds(e, ["method", "length"], "loss", ci="bootstrap", n_boot=500, seed=3)
    t = q.aggregate_seeds(e, ["method", "length"], "loss", ci="t")
    assert se.columns == ["method", "length", "mean", "se", "ci_low", "ci_high", "n"]
    assert se.height == boot.height == 8
    assert boot.get_column("mean").to_list() == se.get_column("mean").to_list()
    for r in boot.iter_rows(named=True):
        assert r["ci_low"] <= r["mean"] <= r["ci_high"]
    # with two values, bootstrap means are one of the two values or their mean
    r = boot.filter(pl.col("method") == "default", pl.col("length") == 40).row(0, named=True)
    assert r["ci_low"] == pytest.approx(0.8) and r["ci_high"] == pytest.approx(1.0)
    # 95% t interval with 1 dof is much wider than one standard error
    assert (t["ci_high"] - t["ci_low"] >= 12 * (se["ci_high"] - se["ci_low"])).all()
    again = q.aggregate_seeds(e, ["method", "length"], "loss", ci="bootstrap", n_boot=500, seed=3)
    assert again.equals(boot)
    overall = q.aggregate_seeds(e, [], "accuracy")
    assert overall.height == 1 and overall["n"][0] == 16


def test_aggregate_seeds_errors(run: Path) -> None:
    e = q.eval_table(run)
    with pytest.raises(q.QueryError, match=r"unknown column.*'acc'.*available columns: trial_id"):
        q.aggregate_seeds(e, metric="acc")
    with pytest.raises(q.QueryError, match=r"'model\.widht'"):
        q.aggregate_seeds(e, ["model.widht"])
    with pytest.raises(q.QueryError, match="ci must be"):
        q.aggregate_seeds(e, ci="sd")  # type: ignore[arg-type]


def test_extrapolation_summary(run: Path) -> None:
    s = q.extrapolation_summary(run)
    assert s.height == len(CURVES)
    got = {
        (r["trial_id"], r["method"]): r
        for r in s.iter_rows(named=True)
    }  # fmt: skip
    # threshold 0.9 x accuracy at L=10
    assert got["rope-s0", "default"]["reference"] == 0.9
    assert got["rope-s0", "default"]["longest_length"] == 20  # 0.85 >= 0.81, 0.5 < 0.81
    assert got["rope-s0", "linear"]["longest_length"] == 10  # 20 fails, so 40 does not count
    assert got["rope-s1", "default"]["longest_length"] == 10
    assert got["rope-s1", "linear"]["longest_length"] == 40
    assert got["alibi-s0", "none"]["longest_length"] == 40
    assert got["alibi-s0", "none"]["longest_ratio"] == 4.0
    assert got["rope-s0", "default"]["loss_ratio_2x"] == pytest.approx(1.5)
    assert got["rope-s0", "default"]["loss_ratio_4x"] == pytest.approx(4.0)
    assert got["alibi-s0", "none"]["loss_ratio_4x"] == pytest.approx(4.0)
    assert "loss_ratio_0.5x" not in s.columns
    assert got["rope-s1", "linear"]["label"] == "rope/linear x2"
    assert got["alibi-s0", "none"]["model.width"] == 64  # config columns follow
    loose = q.extrapolation_summary(run, threshold=0.5)
    assert (
        loose.filter(pl.col("trial_id") == "rope-s0", pl.col("method") == "default")[
            "longest_length"
        ].item()
        == 40
    )
    by_loss = q.extrapolation_summary(run, metric="loss", threshold=0.5)  # loss <= 2 x ref
    r = by_loss.filter(pl.col("trial_id") == "rope-s0", pl.col("method") == "default")
    assert r["longest_length"].item() == 20  # 0.3 <= 0.4, 0.8 > 0.4


def test_extrapolation_summary_without_reference(run: Path) -> None:
    e = q.eval_table(run).filter(pl.col("length") != L)
    s = q.extrapolation_summary(e)
    assert s.get_column("longest_length").null_count() == s.height
    with pytest.raises(q.QueryError, match="threshold"):
        q.extrapolation_summary(run, threshold=1.5)


def test_ntk_table_and_final(run: Path) -> None:
    n = q.ntk_table(run)
    assert n.height == 3 * 3 * 2
    assert {"model.width", "train.length", "label"} <= set(n.columns)
    final = q.ntk_final(n, "distance_from_init")
    assert final.height == 3
    assert set(final.get_column("step")) == {100}
    assert set(final.get_column("probe_length")) == {L}
    v = final.filter(pl.col("trial_id") == "rope-s1")["value"].item()
    assert v == pytest.approx(200 + L / 1000)
    every = q.ntk_final(n, "distance_from_init", probe="all", step="all")
    assert every.height == n.height
    with pytest.raises(q.QueryError, match="metrics present: distance_from_init"):
        q.ntk_final(n, "velocity")


def test_ntk_table_reads_the_ntk_unless_asked_for_the_nngp(tmp_path: Path) -> None:
    """Rows written without a kernel read as the NTK's; the NNGP's rows (kernel "nngp") join
    only when asked for, so figures and claims reading the default see the NTK alone."""
    run = make_store(tmp_path / "run")
    nngp = [{"step": 0, "probe_length": L, "group": "total", "metric": "k_train_mean",
             "value": 7.0, "method": "none", "factor": 1.0, "kernel": "nngp"}]  # fmt: skip
    append_rows(trial_dir(run, "rope-s0"), "ntk", nngp, segment="nngp")
    assert set(q.ntk_table(run)["kernel"]) == {"ntk"} and q.ntk_table(run).height == 3 * 3 * 2
    assert q.ntk_table(run, kernel="nngp")["value"].to_list() == [7.0]
    assert q.ntk_table(run, kernel=None).height == 3 * 3 * 2 + 1


def test_filter_where(run: Path) -> None:
    e = q.eval_table(run)
    got = q.filter_where(e, "\"model.width\" = 64 AND length >= 20 AND label = 'alibi'")
    assert got.height == 2
    assert q.filter_where(e, "method IN ('linear') AND length BETWEEN 5 AND 10").height == 4
    with pytest.raises(q.QueryError, match=r"unknown column.*'widht'.*available columns: trial_id"):
        q.filter_where(e, "widht = 3")
    with pytest.raises(q.QueryError, match="quote column names that contain dots"):
        q.filter_where(e, "model.width = 64")
    with pytest.raises(q.QueryError, match="cannot parse"):
        q.filter_where(e, "length >= = 3")
    with pytest.raises(q.QueryError, match="cannot parse"):
        q.filter_where(e, "1; DROP TABLE eval")


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(q.QueryError, match="not a run directory"):
        q.eval_table(tmp_path / "missing")
    (tmp_path / "plots").mkdir()
    with pytest.raises(q.QueryError) as err:
        q.results_of(tmp_path)
    assert str(err.value) == (
        "not a run directory (no trials/ folder) and no run directory inside it: "
        f"{tmp_path} holds plots/"
    )


def test_a_parent_folder_reads_as_its_run_directories(run: Path) -> None:
    """`--out` of `sweep run` (the parent of the run directory) works as a source too."""
    res = q.results_of(run.parent)
    assert res.run_dirs == (run,)
    assert q.eval_table(run.parent).equals(q.eval_table(run))
    table = cli_analysis.load_table([run.parent], "trials")
    assert sorted(table["trial_id"]) == ["alibi-s0", "rope-s0", "rope-s1"]


@pytest.mark.parametrize(
    ("task", "metric"),
    [
        ("lm_text", "bits_per_byte"),
        ("lm_tokens", "bits_per_byte"),
        ("lm_synthetic", "loss"),
        ("passkey", "accuracy"),
        ("copy", "accuracy"),
        ("mqar", "accuracy"),
        ("flipflop", "accuracy"),
        (None, "accuracy"),
    ],
)
def test_default_metric_of_each_task(task: str | None, metric: str) -> None:
    assert q.default_metric(task) == metric


def test_task_metrics(run: Path) -> None:
    frame = pl.DataFrame({"task.name": ["passkey", "lm_text", "passkey"]})
    assert q.task_metrics(frame) == {"lm_text": "loss", "passkey": "accuracy"}
    assert q.task_metrics(pl.DataFrame({"x": [1]})) == {None: "accuracy"}
    assert q.task_metrics(q.eval_table(run)) == {"copy": "accuracy"}


def test_language_models_are_read_by_bits_per_byte_where_every_row_has_it() -> None:
    """A language-model task whose rows all have bits per byte is read by it (a NaN, from a
    diverged model, still counts); one row without (a run before the column, a synthetic LM's
    tokens) puts the whole task back on loss; a task written with default_metric "loss"
    (before text tasks declared bits_per_byte) reads the column too; accuracy stays."""
    frame = pl.DataFrame(
        {
            "task.name": ["lm_tokens", "lm_tokens", "lm_text", "lm_text", "lm_synthetic",
                          "passkey", "copy"],
            "task.default_metric": ["bits_per_byte", "bits_per_byte", "loss", "loss", "loss",
                                    "accuracy", "loss"],
            "bits_per_byte": [0.9, float("nan"), 1.2, None, None, None, 1.0],
        }
    )  # fmt: skip
    assert q.task_metrics(frame) == {
        "copy": "bits_per_byte",  # written as a language model: read as one
        "lm_synthetic": "loss",
        "lm_text": "loss",
        "lm_tokens": "bits_per_byte",
        "passkey": "accuracy",
    }
    lm_tokens = frame.filter(pl.col("task.name") == "lm_tokens")
    assert q.loss_metric(lm_tokens) == "bits_per_byte" and q.has_bits_per_byte(lm_tokens)
    assert q.loss_metric(frame) == "loss"
    assert q.loss_metric(frame.drop("bits_per_byte").head(1)) == "loss"
    assert q.loss_metric(frame.clear()) == "loss"


def test_same_trial_in_two_run_dirs(run: Path) -> None:
    with pytest.raises(q.QueryError, match=r"trial id.*'alibi-s0'.*more than once"):
        q.eval_table([run, run])


# --- CLI -------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rope-lab")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_analysis.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_results_table(
    run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # the table's width follows the terminal's
    assert _cli(["results", str(run), "--where", '"model.width" = 64 AND length >= 20']) == 0
    out, err = capsys.readouterr()
    assert "│ alibi ┆ 20 " in out and "rope" not in out
    assert "shape: (2, 5)" in out
    assert "task.name" not in out and "status" not in out  # a narrow view ...
    assert "more columns not shown" in err  # ... and says so
    assert _cli(["results", str(run)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "label" in line)
    # the config columns that vary come first, then the eval columns
    assert header.split()[1:] == ["model.position.kind", "┆", "model.width", "┆", "train.seed",
                                  "┆", "label", "┆", "length", "┆", "loss", "┆", "accuracy", "┆",
                                  "exact_match", "│"]  # fmt: skip


def test_cli_results_formats(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["results", str(run), "--select", "trial_id,length,accuracy",
                 "--sort", "trial_id,length", "--format", "csv"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "trial_id,length,accuracy"
    assert lines[1] == "alibi-s0,5,1.0"
    assert len(lines) == 1 + len(CURVES) * len(LENGTHS)
    out = tmp_path / "trials.parquet"
    assert _cli(["results", str(run), "--table", "trials", "--output", str(out)]) == 0
    assert pl.read_parquet(out).height == len(CONFIG)
    assert "wrote 3 rows" in capsys.readouterr().out
    assert _cli(["results", str(run), "--table", "ntk", "--format", "json",
                 "--where", "step = 100 AND probe_length = 10"]) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and {r["step"] for r in rows} == {100}
    csv = tmp_path / "train.csv"
    assert _cli(["results", str(run), "--table", "eval", "--buckets", "--output", str(csv)]) == 0
    assert pl.read_csv(csv).height == len(CURVES) * (len(LENGTHS) + 1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--where", "widht = 3"], "available columns: trial_id, step"),
        (["--where", "model.width = 64"], "double quotes"),
        (["--where", "length >>> 3"], "cannot parse --where"),
        (["--select", "trial_id,nope"], "unknown column(s) 'nope' for --select"),
        (["--format", "parquet"], "--format parquet needs --output FILE"),
    ],
)
def test_cli_results_errors(
    run: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(["results", str(run), *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rope-lab: error: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_plot_kinds_match_plots_module(capsys: pytest.CaptureFixture[str]) -> None:
    from rope_lab.analysis import plots

    with pytest.raises(SystemExit):
        _cli(["plot", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "one of: " + ", ".join(plots.KINDS) in out
    assert "Kinds: extrapolation (metric vs evaluation length per PE kind / RoPE scaling)" in out


def test_report_script_tables(run: Path, tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "analysis" / "report.py"
    spec = importlib.util.spec_from_file_location("analysis_report", path)
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    out = tmp_path / "report"
    assert report.main([str(run), "--out", str(out), "--no-figures"]) == 0
    text = (out / "report.md").read_text()
    assert "- trials: 3 (done 3)" in text
    assert "| label | width 32 | width 64 |" in text
    assert "| rope/linear x2 | 2.5 | – |" in text  # longest ratio 1 (seed 0), 4 (seed 1)
    assert text.index("| rope | 1.5 |") < text.index("| alibi | – | 4 |")
    # claims: PI at L_train, seeds (0.2, 0.3) vs direct (0.2, 0.4): effect -0.05, and the
    # seed resamples reach both signs
    assert "| pi_costs_in_distribution | copy: linear x2 | inconclusive | -0.05 |" in text
    summary = pl.read_csv(out / "extrapolation_summary.csv")
    assert summary.height == len(CURVES)
    assert report.main([str(tmp_path / "missing"), "--out", str(out)]) == 1

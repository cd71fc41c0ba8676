"""`rope-lab claims --stability`: verdicts per (corpus, setup) cell on hand-made rows with
known answers, and the command on a results store."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rope_lab.analysis.claims.stability import format_stability, setup_fields, stability_frame
from rope_lab.cli import main
from rope_lab.results import append_rows, trial_dir, write_trial_row
from tests.analysis.claims.common import trial_rows

# RoPE between ALiBi and learned past L_train on python-docs; worse than learned on
# unicode-data (rope_between flips), ALiBi flat on both
DOCS = {"rope": {1: 1.0, 2: 2.0, 4: 3.0}, "alibi": {1: 1.0, 2: 1.0, 4: 1.01},
        "learned": {1: 1.0, 2: 4.0, 4: 6.0}}  # fmt: skip
TABLE = {**DOCS, "rope": {1: 1.0, 2: 5.0, 4: 8.0}}
CELLS = ["python-docs steps=200", "python-docs steps=400", "unicode-data steps=200",
         "unicode-data steps=400"]  # fmt: skip
RESULT_KEYS = ("step", "method", "factor", "finetune_steps", "length", "loss", "accuracy")


def config(corpus: str, steps: int, width: int = 32) -> dict[str, Any]:
    return {"task.params": f'[["path", "builtin:{corpus}"]]', "train.steps": steps,
            "model.width": width}  # fmt: skip


def grid_rows() -> list[dict[str, Any]]:
    """Two corpora x steps 200/400 x three encodings x 2 seeds; dynamic-NTK RoPE rows on
    python-docs only."""
    rows = []
    for corpus, curves in (("python-docs", DOCS), ("unicode-data", TABLE)):
        for steps in (200, 400):
            cfg = config(corpus, steps)
            for kind, curve in curves.items():
                for seed in (0, 1):
                    loss = {r: v + 0.01 * seed for r, v in curve.items()}
                    rows += trial_rows(kind, seed, loss, task="lm_text", config=cfg)
                    if kind == "rope" and corpus == "python-docs":
                        dyn = {1: 1.0 + 0.01 * seed, 2: 1.5, 4: 2.0}
                        rows += trial_rows(
                            kind, seed, dyn, task="lm_text", config=cfg, method="dynamic", factor=4
                        )
    return rows


def table(rows: list[dict[str, Any]], **kw: Any) -> dict[tuple[str, str], dict[str, Any]]:
    frame = pl.DataFrame(rows, infer_schema_length=None)
    out = stability_frame([frame, None, None, None], n_boot=200, **kw)
    return {(r["claim"], r["scope"]): r for r in out.to_dicts()}


def test_a_claim_that_holds_everywhere_is_stable_one_that_flips_or_is_missing_is_not() -> None:
    rows = table(grid_rows())
    flat = rows["alibi_flat", "lm_text to 4x"]
    assert [flat[c] for c in CELLS] == ["holds +0.01 [+0.01, +0.01]"] * 4
    assert flat["stable"] is True
    between = rows["rope_between", "lm_text @ 4x"]
    # effect: min(learned - rope, rope - alibi) at 4x: min(3, 1.99); min(-2, 6.99); both seeds
    # alike, so each interval is the point
    assert [between[c] for c in CELLS] == [
        "holds +1.99 [+1.99, +1.99]",
        "holds +1.99 [+1.99, +1.99]",
        "fails -2 [-2, -2]",
        "fails -2 [-2, -2]",
    ]
    assert between["stable"] is False
    kept = rows["method_keeps_short_context", "lm_text: dynamic x4"]
    assert [kept[c] for c in CELLS] == ["holds +0 [+0, +0]"] * 2 + ["missing"] * 2
    assert kept["stable"] is False
    assert list(rows["alibi_flat", "lm_text to 4x"]) == ["claim", "scope", *CELLS, "stable"]


def test_a_flip_on_one_cell_is_not_stable_and_a_common_failure_is() -> None:
    rows = grid_rows()
    for row in rows:  # RoPE worse than learned at 4x on the steps-400 python-docs cell too
        at = (row["train.steps"], row["model.position.kind"], row["method"], row["length"])
        if at == (400, "rope", "default", 64) and "docs" in row["task.params"]:
            row["loss"] += 5.0
    between = table(rows)["rope_between", "lm_text @ 4x"]
    assert [between[c] for c in CELLS] == [
        "holds +1.99 [+1.99, +1.99]",
        "fails -2 [-2, -2]",
        "fails -2 [-2, -2]",
        "fails -2 [-2, -2]",
    ]
    only_unicode = [r for r in grid_rows() if "unicode" in r["task.params"]]
    assert table(only_unicode)["rope_between", "lm_text @ 4x"]["stable"] is True  # fails x2


def test_setup_fields_are_grid_axes_crossed_with_every_encoding() -> None:
    rows = grid_rows()
    frame = pl.DataFrame(rows, infer_schema_length=None)
    assert setup_fields(frame) == ["train.steps"]  # seed, encoding and constant width are not
    # ALiBi alone at width 64 (the arm of a width claim) is no setup
    for seed in (0, 1):
        loss = {1: 1.0, 2: 1.0, 4: 1.0}
        cfg = config("python-docs", 200, width=64)
        rows += trial_rows("alibi", seed, loss, task="lm_text", config=cfg)
    assert setup_fields(pl.DataFrame(rows, infer_schema_length=None)) == ["train.steps"]
    # a width crossed with every encoding is
    wide = [
        {**r, "model.width": 64, "trial_id": r["trial_id"] + "-w64"}
        for r in grid_rows()
        if r["train.steps"] == 400
    ]
    both = pl.DataFrame(grid_rows() + wide, infer_schema_length=None)
    assert setup_fields(both) == ["train.steps", "model.width"]
    named = table(grid_rows(), fields=["model.width"])
    assert [c for c in named["alibi_flat", "lm_text to 4x"]][2:4] == [
        "python-docs width=32",
        "unicode-data width=32",
    ]


def write_store(run: Path, corpus: str, curves: dict[str, dict[float, float]]) -> None:
    """One run directory: three encodings x 2 seeds on `corpus`, 200 steps."""
    for kind, curve in curves.items():
        for seed in (0, 1):
            loss = {r: v + 0.01 * seed for r, v in curve.items()}
            rows = trial_rows(kind, seed, loss, task="lm_text", config=config(corpus, 200))
            first = rows[0]
            cfg = {k: v for k, v in first.items() if k.startswith(("model.", "train.", "task."))}
            tid = f"{corpus}-{kind}-s{seed}"
            write_trial_row(trial_dir(run, tid), {"status": "done"}, cfg)
            eval_rows = [{k: r[k] for k in RESULT_KEYS} for r in rows]
            append_rows(trial_dir(run, tid), "eval", eval_rows, segment="eval")


def test_stability_command_on_two_run_dirs_and_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs, table_run = tmp_path / "docs", tmp_path / "table"
    write_store(docs, "python-docs", DOCS)
    write_store(table_run, "unicode-data", TABLE)
    runs = [str(docs), str(table_run)]
    assert main(["claims", "--stability", *runs, "--claim", "rope_between"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["claim", "scope", "python-docs", "unicode-data", "stable"]
    assert lines[2].split() == ["rope_between", "lm_text", "@", "4x", "holds", "+1.99", "[+1.99,",
                                "+1.99]", "fails", "-2", "[-2,", "-2]", "false"]  # fmt: skip
    assert lines[-1] == "0 of 1 stable"
    out = tmp_path / "stab.csv"
    assert main(["claims", "--stability", *runs, "--output", str(out)]) == 0
    with out.open() as f:
        by_claim = {(r["claim"], r["scope"]): r for r in csv.DictReader(f)}
    assert by_claim["alibi_flat", "lm_text to 4x"]["stable"] == "true"
    assert by_claim["rope_between", "lm_text @ 4x"]["unicode-data"] == "fails -2 [-2, -2]"
    parquet = tmp_path / "stab.parquet"
    assert main(["claims", "--stability", *runs, "--output", str(parquet)]) == 0
    frame = pl.read_parquet(parquet)
    assert frame.columns == ["claim", "scope", "python-docs", "unicode-data", "stable"]
    assert frame.schema["stable"] == pl.Boolean


def test_stability_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_store(run, "python-docs", DOCS)
    assert main(["claims", "--stability", str(run), "--setup", "train.stepz"]) == 1
    assert capsys.readouterr().err == (
        "rope-lab: error: --setup train.stepz: not a config column of these runs\n"
    )
    assert main(["claims", str(run), "--setup", "train.steps"]) == 1
    assert capsys.readouterr().err == "rope-lab: error: --setup needs --stability\n"
    inside = run / "trials" / "stab.csv"
    assert main(["claims", "--stability", str(run), "--output", str(inside)]) == 1
    assert "is inside" in capsys.readouterr().err


def test_format_stability_md_and_json() -> None:
    frame = pl.DataFrame(
        {"claim": ["c"], "scope": ["s"], "docs": ["holds +1"], "code": [None], "stable": [True]}
    )
    assert format_stability(frame, "md").splitlines()[2] == "| c | s | holds +1 |  | true |"
    assert '"stable": true' in format_stability(frame, "json")


def test_cells_are_ordered_by_corpus_then_setup_values() -> None:
    """steps 400 before 1000 (by value, not as text)."""
    rows = [{**r, "train.steps": 1000} if r["train.steps"] == 200 else r for r in grid_rows()]
    row = table(rows)["alibi_flat", "lm_text to 4x"]
    assert list(row)[2:4] == ["python-docs steps=400", "python-docs steps=1000"]


def test_a_cell_shows_the_interval_its_seeds_give() -> None:
    """Learned's second seed 1 nat lower at 4x on unicode-data: its seeds' rope_between effects
    are min(6 - 8, 8 - 1.01) = -2 and min(5.01 - 8.01, ...) = -3, so the cell reads
    fails -2.5 with the interval [-3, -2] the two seeds span."""
    rows = grid_rows()
    for row in rows:
        at = (row["model.position.kind"], row["train.seed"], row["length"])
        if at == ("learned", 1, 64) and "unicode" in row["task.params"]:
            row["loss"] -= 1.0
    between = table(rows)["rope_between", "lm_text @ 4x"]
    low, high = (float(x) for x in between[CELLS[2]].split("[")[1].rstrip("]").split(", "))
    effect = float(between[CELLS[2]].split()[1])
    assert between[CELLS[2]].startswith("fails -2.5")
    assert low == pytest.approx(-3.0) and high == pytest.approx(-2.0)
    assert low < effect < high

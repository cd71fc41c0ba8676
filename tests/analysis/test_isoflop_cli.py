"""`rope-lab isoflop` on a results store written through the store's own API: the profile
minima of a known loss law at L_train and at 4 x L_train, exports, and no JAX import."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rope_lab.cli import main
from rope_lab.results import append_rows, trial_dir, write_trial_row

E, A, B, EXPONENT = 1.69, 406.4, 410.7, 0.3  # alpha = beta: parabola vertices are exact
BUDGETS = (1e15, 1e16, 1e17)
SHORT = 1e18  # a budget with 2 sizes only: its profile is refused
LENGTH = 16


def n_opt(c: float) -> float:
    """Closed-form compute-optimal N at compute c (alpha = beta: a = 1/2)."""
    return (A / B) ** (1 / (2 * EXPONENT)) * (c / 6) ** 0.5


def write_store(run: Path) -> Path:
    """ALiBi trials, 3 sizes around N*(C) per budget (2 at SHORT), one seed; at 4 x L_train
    A is 1.2 x larger (so larger models are optimal there)."""
    for c, k in [*((c, k) for c in BUDGETS for k in (-1, 0, 1)), (SHORT, -1), (SHORT, 0)]:
        n = n_opt(c) * math.exp(0.5 * k)
        d = c / (6 * n)
        loss = {r: E + A * (1 + 0.2 * (r > 1)) / n**EXPONENT + B / d**EXPONENT for r in (1, 4)}
        tid = f"c{c:g}-k{k}"
        config = {
            "train.seed": 0,
            "train.length": LENGTH,
            "task.name": "lm",
            "model.position.kind": "alibi",
        }
        row = {"status": "done", "n_params_non_embedding": round(n), "tokens_seen": round(d)}
        write_trial_row(trial_dir(run, tid), row, config)
        evals = [
            {
                "step": 10,
                "method": "none",
                "factor": 1.0,
                "finetune_steps": 0,
                "length": LENGTH * r,
                "loss": loss[r],
            }
            for r in (1, 4)
        ]
        append_rows(trial_dir(run, tid), "eval", evals, segment="eval")
    return run


def test_cli_prints_profiles_and_frontier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_store(tmp_path / "run")
    assert main(["isoflop", str(run), "--n-boot", "0"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.startswith("isoFLOP profiles of loss: C = 6 N D (N = n_params_non_embedding")
    assert "bucketed within 10%" in head and "frontier N* ∝ C^a" in out
    assert "n_star_vs_1x" in out.splitlines()[2]

    target = tmp_path / "iso.json"
    assert (
        main(["isoflop", str(run), "--n-boot", "0", "--format", "json", "--output", str(target)])
        == 0
    )
    got = json.loads(target.read_text())
    profiles = pl.DataFrame(got["profiles"])
    assert sorted(set(profiles.get_column("length_ratio"))) == [1.0, 4.0]
    refused = profiles.filter(pl.col("compute") > SHORT / 2).get_column("error").to_list()
    assert refused == ["2 distinct N; a parabola in log N needs at least 3"] * 2
    fitted = profiles.filter(pl.col("error").is_null())
    at_1 = fitted.filter(pl.col("length_ratio") == 1.0).sort("compute")
    at_4 = fitted.filter(pl.col("length_ratio") == 4.0).sort("compute")
    n_1, n_4 = at_1.get_column("n_star").to_numpy(), at_4.get_column("n_star").to_numpy()
    assert n_1.tolist() == pytest.approx([n_opt(c) for c in BUDGETS], rel=1e-3)
    assert at_1.get_column("n_star_vs_1x").to_list() == pytest.approx([1.0] * 3, rel=1e-12)
    assert at_4.get_column("n_star_vs_1x").to_list() == pytest.approx(n_4 / n_1, rel=1e-12)
    assert np.all(n_4 / n_1 > 1.2)  # the optimum moves to larger N at 4 x L_train
    (front,) = [f for f in got["frontier"] if f["length_ratio"] == 4.0]
    assert front["a"] == pytest.approx(0.5, abs=1e-3) and front["error"] is None
    assert front["n_profiles"] == 3

    csv = tmp_path / "iso.csv"
    assert (
        main(
            [
                "isoflop",
                str(run),
                "--ratio",
                "4",
                "--n-boot",
                "0",
                "--output",
                str(csv),
                "--format",
                "csv",
            ]
        )
        == 0
    )
    table = pl.read_csv(csv)
    assert table.height == 4 and set(table.get_column("length_ratio")) == {4.0}
    assert table.get_column("a").to_list() == pytest.approx([0.5] * 4, abs=1e-3)


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_store(tmp_path / "run")
    assert main(["isoflop", str(run), "--ratio", "2"]) == 1
    err = capsys.readouterr().err
    assert err == "rope-lab: error: --ratio 2: no eval rows there; ratios are [1.0, 4.0]\n"
    assert main(["isoflop", str(run), "--ratio", "x"]) == 1
    err = capsys.readouterr().err
    assert err == "rope-lab: error: --ratio 'x': expected comma-separated numbers, e.g. 1,4\n"


def test_cli_imports_no_jax(tmp_path: Path) -> None:
    run = write_store(tmp_path / "run")
    code = (
        "import sys; from rope_lab.cli import main; "
        f"rc = main(['isoflop', {str(run)!r}, '--n-boot', '0']); "
        "print(rc, 'jax' in sys.modules, 'equinox' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 False False"

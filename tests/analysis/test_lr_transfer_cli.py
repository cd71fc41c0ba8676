"""`rope-lab lr-transfer` on a results store written through the store's own API: the optimal
lr per width of known loss curves, the slope, and the --output checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rope_lab.cli import main
from rope_lab.results import append_rows, trial_dir, write_trial_row
from tests.analysis.test_lr_transfer import LRS, WIDTHS, curve, lr_star

LENGTH = 16
SLOPES = {"mup": 0.0, "sp": -1.0}


def write_store(run: Path) -> Path:
    """Trials over lr x width x parametrisation x 2 seeds, exact parabolas in log lr."""
    for p, slope in SLOPES.items():
        for w in WIDTHS:
            for lr in LRS:
                for seed in (0, 1):
                    tid = f"{p}-w{w}-lr{lr:g}-s{seed}"
                    config = {"train.seed": seed, "train.length": LENGTH, "task.name": "lm",
                              "model.position.kind": "alibi", "model.width": w,
                              "model.parametrization": p, "train.lr": lr}  # fmt: skip
                    write_trial_row(trial_dir(run, tid), {"status": "done"}, config)
                    loss = curve(lr, lr_star(w, slope)) + 0.001 * seed
                    row = {"step": 10, "method": "none", "factor": 1.0, "finetune_steps": 0,
                           "length": LENGTH, "loss": loss}  # fmt: skip
                    append_rows(trial_dir(run, tid), "eval", [row], segment="eval")
    return run


def test_cli_prints_the_optima_and_slopes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_store(tmp_path / "run")
    assert main(["lr-transfer", str(run), "--n-boot", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("optimal lr per width (loss; parabola in log lr")
    assert "slope of log lr* against log width" in out
    target = tmp_path / "tables" / "lr.txt"
    assert main(["lr-transfer", str(run), "--n-boot", "0", "--output", str(target)]) == 0
    assert capsys.readouterr().out == f"wrote 6 optima and 2 slopes to {target}\n"
    text = target.read_text()
    # sp's optimum at width 128 is lr*(128) = 5e-3, printed in the table
    assert f"{lr_star(128, -1.0):g}" in text and math.isclose(lr_star(128, -1.0), 5e-3)


def test_an_output_inside_the_results_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_store(tmp_path / "run")
    inside = run / "trials" / "x.txt"
    assert main(["lr-transfer", str(run), "--output", str(inside)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"rope-lab: error: --output: {inside} is inside {run / 'trials'}")
    assert len(err.strip().splitlines()) == 1

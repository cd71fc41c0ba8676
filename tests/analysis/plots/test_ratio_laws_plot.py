"""`rope-lab loss-law --by-ratio` and the loss-law-ratios plot on a store whose gaps follow
known power laws in N."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import polars as pl
import pytest

from rope_lab.cli import main
from tests.analysis.plots.synthetic import make_gap_store, png_ok

matplotlib.use("Agg")

GAMMAS = {"alibi": -0.3, "none": 0.1}


@pytest.fixture(scope="module")
def gap_store(tmp_path_factory) -> Path:
    return make_gap_store(tmp_path_factory.mktemp("gaps"), GAMMAS, ratios=(1, 4))


def test_by_ratio_prints_each_labels_laws_and_gap_exponents(gap_store, capsys) -> None:
    args = ["loss-law", str(gap_store), "--by-ratio", "--n-boot", "100"]
    assert main([*args, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["label"], r["length_ratio"]) for r in rows] == [
        (k, r) for k in GAMMAS for r in (1.0, 4.0)
    ]
    for row in rows:
        assert row["error"] is None and row["n_trials"] == 15 and row["law"] == "L(N)"
        assert row["heldout_points"] == 3 and row["heldout_max_rel_error"] < 0.05
        if row["length_ratio"] == 1.0:
            assert row["gamma"] is None
            continue
        gamma = GAMMAS[row["label"]]
        # 3 seeds: the percentile interval is narrow (it may just miss the truth), so pin
        # the estimate and which side of 0 the whole interval lies on
        assert row["gamma"] == pytest.approx(gamma, abs=0.005)
        assert row["gamma_ci_low"] <= row["gamma"] <= row["gamma_ci_high"]
        assert (row["gamma_ci_high"] < 0) if gamma < 0 else (row["gamma_ci_low"] > 0)
        assert row["gap_g"] == pytest.approx(100.0, rel=0.05)  # 50 log2(4)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("loss vs n_params_non_embedding per length ratio r = L_eval / L_train")
    assert "gamma_ci_high" in text and "alibi" in text


def test_by_ratio_writes_parquet_and_refuses_an_output_inside_the_runs(gap_store, tmp_path,
                                                                       capsys) -> None:  # fmt: skip
    out = tmp_path / "laws.parquet"
    args = ["loss-law", str(gap_store), "--by-ratio", "--n-boot", "0"]
    assert main([*args, "--format", "parquet", "--output", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote 4 fits to {out}\n"
    table = pl.read_parquet(out)
    assert table.height == 4 and table.get_column("alpha_ci_low").is_nan().all()
    assert table.get_column("gap_nonpositive").drop_nulls().to_list() == [0, 0]
    # --law-boot gives each ratio's law its seed intervals
    assert main([*args, "--law-boot", "20", "--format", "parquet", "--output", str(out)]) == 0
    capsys.readouterr()
    table = pl.read_parquet(out)
    alpha, lows, highs = (table.get_column(c) for c in ("alpha", "alpha_ci_low", "alpha_ci_high"))
    # (3 seeds: the percentile interval may end at the estimate itself)
    assert ((lows <= alpha + 1e-9) & (alpha <= highs + 1e-9) & (highs - lows > 0)).all()
    inside = gap_store / "trials" / "laws.csv"
    assert main([*args, "--format", "csv", "--output", str(inside)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"rope-lab: error: --output: {inside} is inside") and err.count("\n") == 1
    assert main([*args, "--length-ratio", "2"]) == 1
    assert capsys.readouterr().err == (
        "rope-lab: error: --length-ratio and --by-ratio both given: --by-ratio fits every ratio\n"
    )


def test_the_plot_draws_a_law_per_ratio_with_its_gap_exponent(gap_store, tmp_path) -> None:
    from rope_lab.analysis import plots

    out = tmp_path / "ratios.png"
    fig = plots.plot("loss-law-ratios", gap_store, out=out, n_boot=50)
    png_ok(out)
    assert [ax.get_title() for ax in fig.axes] == ["lm_text · alibi", "lm_text · none"]
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels[0].startswith("1x: α = ") and "held out" in labels[0]
        assert labels[1].startswith("4x: α = ") and "gap γ = " in labels[1]
        curves = [line for line in ax.get_lines() if len(line.get_xdata()) == 60]
        assert len(curves) == 2
    alibi = [t.get_text() for t in fig.axes[0].get_legend().get_texts()][1]
    assert "gap γ = -0.30 [" in alibi

"""The loss-law plot and `rope-lab loss-law` on a store whose losses follow a known law."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
import pytest

from rope_lab.analysis.loss_law_table import held_out_check
from rope_lab.analysis.plots import scaling_data
from rope_lab.cli import main
from rope_lab.results import append_rows, mark_success, trial_dir, write_trial_row
from tests.analysis.plots.synthetic import png_ok

matplotlib.use("Agg")

SIZES = (2e4, 8e4, 3.2e5, 1.28e6, 5.12e6)
TOKENS = (1e6, 4e6, 1.6e7)
# per kind: E, A, alpha, B, beta
LAWS = {"alibi": (1.2, 40.0, 0.35, 300.0, 0.4), "none": (1.4, 25.0, 0.30, 300.0, 0.4)}


def law(kind: str, n: float, d: float) -> float:
    E, A, alpha, B, beta = LAWS[kind]
    return E + A * n**-alpha + B * d**-beta


def make_law_store(root: Path, tokens=TOKENS, bytes_per_token: float | None = None) -> Path:
    """Trials (2 kinds x 5 sizes x token counts x 3 seeds) whose loss at L_train is the law of
    their kind times a seeded noise factor within 0.5%; with ``bytes_per_token`` their rows
    have bits per byte, loss / bytes_per_token / ln 2."""
    run = root / ("law" if bytes_per_token is None else "law_bpb")
    rng = np.random.default_rng(0)
    for kind, n, d, seed in itertools.product(LAWS, SIZES, tokens, (0, 1, 2)):
        folder = trial_dir(run, f"lm-{kind}-n{n:g}-d{d:g}-s{seed}")
        config = {
            "model.width": int(math.sqrt(n / 12)),
            "model.position.kind": kind,
            "task.name": "lm_text",
            "train.length": 32,
            "train.seed": seed,
        }
        row = {"status": "done", "sweep": "law", "n_params": int(n * 1.1)}
        row |= {"n_params_non_embedding": int(n), "tokens_seen": int(d)}
        write_trial_row(folder, row, config)
        loss = law(kind, n, d) * (1 + 0.005 * rng.uniform(-1, 1))
        common = {"step": 100, "method": "none", "factor": 1.0, "finetune_steps": 0}
        rows = [{**common, "length": length, "loss": loss + 0.1 * (length > 32)}
                for length in (32, 64)]  # fmt: skip
        if bytes_per_token is not None:
            for r in rows:
                r["bits_per_byte"] = r["loss"] / bytes_per_token / math.log(2)
        append_rows(folder, "eval", rows, segment="eval")
        mark_success(folder)
    return run


@pytest.fixture(scope="module")
def law_store(tmp_path_factory) -> Path:
    return make_law_store(tmp_path_factory.mktemp("law"))


def test_cli_recovers_each_kinds_exponents_and_predicts_the_largest_model(law_store, capsys):
    assert main(["loss-law", str(law_store), "--format", "json", "--n-boot", "40"]) == 0
    fits = {r["model.position.kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(fits) == set(LAWS)
    for kind, (E, _, alpha, _, beta) in LAWS.items():
        fit = fits[kind]
        assert fit["law"] == "L(N, D)" and fit["error"] is None and fit["n"] == 45
        assert fit["alpha"] == pytest.approx(alpha, abs=0.05), fit
        assert fit["beta"] == pytest.approx(beta, abs=0.05), fit
        assert fit["E"] == pytest.approx(E, abs=0.1), fit
        assert fit["alpha_ci_low"] <= fit["alpha"] <= fit["alpha_ci_high"]
        assert fit["n_groups"] == 3 and 0 < fit["heldout_max_rel_error"] < 0.02
        # the held-out error is the fit without the largest N predicting it, recomputed here
        rows = scaling_data(law_store, "loss")[0].filter(pl.col("model.position.kind") == kind)
        check = held_out_check(
            rows["n_params_non_embedding"].to_numpy(),
            rows["tokens_seen"].to_numpy(),
            rows["loss"].to_numpy(),
            groups=rows["train.seed"].to_numpy(),
        )
        assert fit["heldout_max_rel_error"] == pytest.approx(check.max_abs_rel_error, rel=1e-6)
    assert main(["loss-law", str(law_store), "--n-boot", "10"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("loss at L_train (PE as trained) vs n_params_non_embedding")
    assert "L(N, D)" in text and "alibi" in text


def test_one_token_count_fits_the_one_variable_law(tmp_path, capsys):
    run = make_law_store(tmp_path, tokens=(4e6,))
    assert main(["loss-law", str(run), "--format", "json", "--n-boot", "0", "--by", ""]) == 0
    (fit,) = json.loads(capsys.readouterr().out)  # both kinds pooled: one fit, still a law
    assert fit["law"] == "L(N)" and fit["B"] == 0.0 and fit["n"] == 30


def test_the_plot_draws_a_fitted_curve_per_kind_and_token_count(law_store, tmp_path):
    from rope_lab.analysis import plots

    out = tmp_path / "law.png"
    fig = plots.plot("loss-law", law_store, out=out, n_boot=20)
    png_ok(out)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 2 and all("α = " in t and "β = " in t for t in labels)
    assert all("largest N predicted within" in t for t in labels)
    curves = [line for line in ax.get_lines() if len(line.get_xdata()) == 60]
    assert len(curves) == len(LAWS) * len(TOKENS)
    # each drawn curve is the fitted law: at the largest size it sits within 2% of the data
    top = curves[-1].get_ydata()[-1]
    assert min(abs(top / law(k, SIZES[-1], d) - 1) for k in LAWS for d in TOKENS) < 0.02


def test_a_missing_size_column_is_a_clear_error(law_store, capsys):
    assert main(["loss-law", str(law_store), "--n", "model.depth"]) == 1
    assert "model.depth" in capsys.readouterr().err


def test_text_trials_fit_bits_per_byte_and_the_table_names_its_units(tmp_path, capsys):
    """With bits per byte in every row (4 bytes a token) the law is fitted to it by default:
    bits per byte = loss / (4 ln 2), so E and A scale by 1 / (4 ln 2) = 0.360674 and the
    exponents do not move; --metric loss fits nats per token; D is in tokens either way."""
    run = make_law_store(tmp_path, bytes_per_token=4.0)
    fits = {}
    for metric in ("bits_per_byte", "loss", None):
        args = ["loss-law", str(run), "--format", "json", "--n-boot", "0"]
        assert main(args + (["--metric", metric] if metric else [])) == 0
        rows = json.loads(capsys.readouterr().out)
        fits[metric] = {r["model.position.kind"]: r for r in rows}
    assert fits[None] == fits["bits_per_byte"]
    scale = 1 / (4 * math.log(2))
    assert scale == pytest.approx(0.360674, abs=1e-6)
    for kind in LAWS:
        bpb, nats = fits["bits_per_byte"][kind], fits["loss"][kind]
        assert (bpb["loss"], bpb["d_unit"]) == ("bits_per_byte", "tokens")
        assert (nats["loss"], nats["d_unit"]) == ("loss", "tokens")
        assert bpb["E"] == pytest.approx(scale * nats["E"], rel=1e-3)
        assert bpb["A"] == pytest.approx(scale * nats["A"], rel=1e-2)
        assert bpb["alpha"] == pytest.approx(nats["alpha"], abs=1e-3)
        assert bpb["beta"] == pytest.approx(nats["beta"], abs=1e-3)
    assert main(["loss-law", str(run), "--n-boot", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("bits_per_byte at L_train (PE as trained) vs n_params_non_embedding")
    assert "D in training tokens" in text.splitlines()[0]

"""The optimal lr per width and its slope in width, recovered from losses with known optima:
loss = E + K (log lr - log lr*(w))^2 with lr*(w) = LR0 (w / 32)^s, a parabola in log lr, so the
three-point parabola through the best lr and its neighbours has its vertex exactly at lr*."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from rope_lab.analysis.lr_transfer import fit_lr_optimum, lr_transfer_tables, transfer_slope

LRS = (1e-3, 3.2e-3, 1e-2, 3.2e-2, 1e-1)
WIDTHS = (32, 64, 128)
LR0 = 2e-2


def lr_star(width: float, slope: float) -> float:
    """The true optimum at ``width`` under transfer slope ``slope``."""
    return LR0 * (width / 32) ** slope


def curve(lr: float, best: float) -> float:
    """The noiseless loss of lr when the optimum is ``best``."""
    return 2.0 + 0.05 * math.log(lr / best) ** 2


def sweep_rows(slopes: dict[str, float], *, seeds: int = 4, noise: float = 0.0) -> pl.DataFrame:
    """Eval rows at ratios 1 and 4 of an lr x width x parametrisation x seed grid."""
    rng = np.random.default_rng(0)
    rows = []
    for p, slope in slopes.items():
        for w in WIDTHS:
            for lr in LRS:
                for s in range(seeds):
                    for ratio in (1.0, 4.0):
                        loss = curve(lr, lr_star(w, slope)) + ratio / 10 + rng.normal(0, noise)
                        rows.append({"task.name": "lm_text", "model.parametrization": p,
                                     "length_ratio": ratio, "model.width": w, "train.lr": lr,
                                     "train.seed": s, "loss": loss, "trial_id": f"{p}{w}{lr}{s}",
                                     "step": 200})  # fmt: skip
    return pl.DataFrame(rows)


def test_the_vertex_of_a_parabola_in_log_lr_is_found_exactly() -> None:
    best = 1.7e-2
    fit = fit_lr_optimum(LRS, [curve(lr, best) for lr in LRS])
    assert fit.error is None and fit.fit == "parabola"
    assert fit.lr_star == pytest.approx(best, rel=1e-9)
    assert fit.loss_at_star == pytest.approx(2.0, abs=1e-12)
    assert fit.best_lr == 1e-2


@pytest.mark.parametrize(("best", "side"), [(3e-4, "smallest"), (0.5, "largest")])
def test_a_best_lr_at_the_edge_of_the_grid_is_refused(best: float, side: str) -> None:
    fit = fit_lr_optimum(LRS, [curve(lr, best) for lr in LRS])
    assert math.isnan(fit.lr_star)
    edge = LRS[0] if side == "smallest" else LRS[-1]
    assert fit.error == (f"best lr {edge:.3g} is the {side} of the grid [0.001, 0.1]: the "
                         "optimum is not bracketed")  # fmt: skip


def test_a_diverged_neighbour_brackets_the_optimum_at_the_grid_point() -> None:
    losses = [curve(lr, 3e-2) for lr in LRS]
    losses[-1] = math.nan
    fit = fit_lr_optimum(LRS, losses)
    assert (fit.lr_star, fit.fit, fit.error) == (3.2e-2, "grid point (a neighbour diverged)", None)


def test_the_slope_is_the_log_log_least_squares_line() -> None:
    assert transfer_slope(WIDTHS, [lr_star(w, -0.7) for w in WIDTHS]) == pytest.approx(-0.7)
    assert math.isnan(transfer_slope(WIDTHS, [1e-2, math.nan, math.nan]))


def test_tables_recover_each_parametrisations_slope_within_its_interval() -> None:
    truth = {"mup": 0.0, "sp": -1.0}
    optima, slopes = lr_transfer_tables(sweep_rows(truth, noise=0.002), n_boot=200)
    assert slopes.height == 4  # 2 parametrisations x 2 ratios
    for row in slopes.to_dicts():
        s = truth[row["model.parametrization"]]
        assert row["slope_ci_low"] <= s <= row["slope_ci_high"], row
        assert row["slope"] == pytest.approx(s, abs=0.1)
        assert (row["widths"], row["seeds"], row["error"]) == (3, 4, None)
    for row in optima.to_dicts():
        want = lr_star(row["width"], truth[row["model.parametrization"]])
        assert row["lr_star"] == pytest.approx(want, rel=0.1), row
        assert row["lr_star_ci_low"] < row["lr_star"] < row["lr_star_ci_high"], row


def test_a_refused_width_is_left_out_of_the_slope_and_named() -> None:
    rows = sweep_rows({"sp": -3.0}, seeds=2)  # lr*(128) = 3e-4: below the grid
    optima, slopes = lr_transfer_tables(rows.filter(pl.col("length_ratio") == 1.0), n_boot=50)
    refused = optima.filter(pl.col("width") == 128).row(0, named=True)
    assert refused["error"].startswith("best lr 0.001 is the smallest of the grid")
    (row,) = slopes.to_dicts()
    assert row["widths"] == 2 and row["error"] == "1 width(s) refused: slope over the other 2"
    assert row["slope"] == pytest.approx(-3.0)


def test_missing_columns_are_named() -> None:
    with pytest.raises(ValueError, match=r"lr-transfer: no column\(s\) \['train.lr'\]"):
        lr_transfer_tables(sweep_rows({"sp": 0.0}).drop("train.lr"))

"""Power-law fits recover known exponents from synthetic data; drift slopes; fits tables."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rope_lab.analysis.fits import drift_slope, fit_power_law, fits_table

WIDTHS = 2.0 ** np.arange(5, 12)  # 32 .. 2048
SEEDS = (0, 1, 2)


def _data(b: float, sigma: float, *, a: float = 3.0, c: float = 0.0, seed: int = 0):
    """y = a x^-b + c with multiplicative log-normal noise, 3 seeds per width."""
    rng = np.random.default_rng(seed)
    x = np.repeat(WIDTHS, len(SEEDS))
    groups = np.tile(SEEDS, len(WIDTHS))
    y = (a * x**-b + c) * np.exp(rng.normal(0.0, sigma, x.size))
    return x, y, groups


def test_noiseless_exact() -> None:
    x = WIDTHS
    fit = fit_power_law(x, 2.5 * x**-0.37, n_boot=50)
    assert fit.b == pytest.approx(0.37, abs=1e-9)
    assert fit.a == pytest.approx(2.5, rel=1e-9)
    assert fit.c == 0.0 and fit.r2 == pytest.approx(1.0)
    assert fit.predict([64.0])[0] == pytest.approx(2.5 * 64**-0.37)
    assert fit.n == len(WIDTHS) and fit.n_groups == len(WIDTHS)


@pytest.mark.parametrize("b", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_exponent_within_tolerance(b: float, seed: int) -> None:
    """Tolerance: |b_hat - b| < 0.05 for noise sigma 0.05 (7 widths x 3 seeds)."""
    x, y, groups = _data(b, 0.05, seed=seed)
    fit = fit_power_law(x, y, groups=groups, n_boot=300, seed=seed)
    assert abs(fit.b - b) < 0.05
    assert fit.b_ci[0] < fit.b < fit.b_ci[1]
    assert fit.b_ci[1] - fit.b_ci[0] < 0.1
    assert fit.n_groups == len(SEEDS)
    assert fit.r2 > 0.95


def test_ci_covers_truth_most_of_the_time() -> None:
    covered = 0
    for seed in range(20):
        x, y, _ = _data(0.5, 0.05, seed=100 + seed)
        fit = fit_power_law(x, y, n_boot=200, seed=seed)
        covered += fit.b_ci[0] <= 0.5 <= fit.b_ci[1]
    assert covered >= 15  # nominal 95%: 19 of 20 expected, allow for the small sample


def test_offset_fit() -> None:
    """y = 3 x^-0.7 + 0.3, sigma 0.01: b within 0.1, c within 0.03."""
    x, y, groups = _data(0.7, 0.01, c=0.3, seed=4)
    fit = fit_power_law(x, y, offset=True, groups=groups, n_boot=100)
    assert abs(fit.b - 0.7) < 0.1
    assert abs(fit.c - 0.3) < 0.03
    assert fit.c_ci[0] <= fit.c <= fit.c_ci[1]
    no_offset = fit_power_law(x, y, n_boot=0)
    assert no_offset.b < 0.5  # the floor flattens a pure power law
    lo, hi = fit.band(WIDTHS)
    mid = fit.predict(WIDTHS)
    assert np.all(lo <= mid + 1e-12) and np.all(mid <= hi + 1e-12)


def test_bootstrap_is_reproducible() -> None:
    x, y, groups = _data(0.5, 0.05)
    f1 = fit_power_law(x, y, groups=groups, n_boot=100, seed=7)
    f2 = fit_power_law(x, y, groups=groups, n_boot=100, seed=7)
    assert f1.b_ci == f2.b_ci and f1.a_ci == f2.a_ci


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="x > 0"):
        fit_power_law([0.0, 1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="y > 0"):
        fit_power_law([1.0, 2.0], [1.0, -2.0])
    with pytest.raises(ValueError, match="two distinct x"):
        fit_power_law([4.0, 4.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equal length"):
        fit_power_law([1.0, 2.0], [1.0])
    fit = fit_power_law([1.0, 2.0, np.nan], [1.0, 0.5, 3.0], n_boot=10)  # NaN rows dropped
    assert fit.n == 2 and fit.b == pytest.approx(1.0)


def test_drift_slope_from_long_ntk_rows() -> None:
    rows = []
    for width in (32, 64, 128, 256):
        for seed in SEEDS:
            tid = f"w{width}-s{seed}"
            for step in (0, 100):
                drift = 4.0 * width**-0.5 * (1 + 0.01 * seed) * (step > 0)
                rows.append(
                    {"trial_id": tid, "step": step, "probe_length": 32, "group": "total",
                     "metric": "distance_from_init", "value": drift, "method": "none",
                     "factor": 1.0, "model.width": width, "train.seed": seed, "train.length": 32}
                )  # fmt: skip
    s = drift_slope(pl.DataFrame(rows), n_boot=100)
    assert s.slope == pytest.approx(-0.5, abs=1e-6)
    assert s.n == 4 * len(SEEDS)
    # already one row per trial, the metric as a column
    wide = pl.DataFrame(
        {"model.width": [32, 64, 128], "distance_from_init": [1.0, 0.5, 0.25]}
    )  # fmt: skip
    assert drift_slope(wide, n_boot=10).slope == pytest.approx(-1.0)


def test_fits_table() -> None:
    parts = []
    for kind, b in (("rope", 0.3), ("alibi", 0.6)):
        x, y, groups = _data(b, 0.02, seed=1)
        parts.append(
            pl.DataFrame({"kind": kind, "model.width": x, "loss": y, "train.seed": groups})
        )
    parts.append(pl.DataFrame({"kind": "one", "model.width": [64.0], "loss": [1.0],
                               "train.seed": [0]}))  # fmt: skip
    table = fits_table(pl.concat(parts), x="model.width", y="loss", by=["kind"], n_boot=100)
    assert table.columns[:4] == ["kind", "a", "b", "c"]
    got = {r["kind"]: r for r in table.iter_rows(named=True)}
    assert abs(got["rope"]["b"] - 0.3) < 0.05 and abs(got["alibi"]["b"] - 0.6) < 0.05
    assert got["rope"]["n_groups"] == len(SEEDS)
    assert got["rope"]["b_ci_low"] < got["rope"]["b"] < got["rope"]["b_ci_high"]
    assert got["one"]["b"] is None and "two distinct x" in got["one"]["error"]
    assert got["rope"]["error"] is None

"""Loss-law fits L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. approach 3) recover known
laws, resist outliers, extrapolate; non-embedding parameter counts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import optimize
from threadpoolctl import threadpool_info

from rope_lab.analysis import loss_law
from rope_lab.analysis.loss_law import fit_loss_law, huber
from rope_lab.analysis.loss_law_table import held_out_check

# Hoffmann et al.'s published estimates, as a ground truth of realistic size.
TRUE = {"E": 1.69, "A": 406.4, "alpha": 0.34, "B": 410.7, "beta": 0.28}
NAMES = tuple(TRUE)


def _law(n, d, E, A, alpha, B, beta):
    return E + A * np.power(n, -alpha) + B * np.power(d, -beta)


def _grid(n_values: int = 6, d_values: int = 5):
    """Every (N, D) of N in [1e6, 1e10] x D in [1e8, 1e12], log-spaced."""
    nn, dd = np.meshgrid(np.geomspace(1e6, 1e10, n_values), np.geomspace(1e8, 1e12, d_values))
    return nn.ravel(), dd.ravel()


def test_noiseless_two_variable_law_is_recovered() -> None:
    n, d = _grid()
    fit = fit_loss_law(n, d, _law(n, d, **TRUE), n_boot=0)
    for name in NAMES:
        assert getattr(fit, name) == pytest.approx(TRUE[name], rel=1e-4), name
    assert fit.objective < 1e-12 and fit.n == 30 and fit.two_variable
    assert fit.predict([3e8], [7e9])[0] == pytest.approx(_law(3e8, 7e9, **TRUE), rel=1e-8)
    assert math.isnan(fit.E_ci[0])  # no bootstrap, no interval


def test_noiseless_one_variable_law_is_recovered_with_d_none() -> None:
    n = np.geomspace(1e5, 1e9, 7)
    fit = fit_loss_law(n, None, 2.1 + 55.0 * n**-0.3, n_boot=0)
    assert (fit.E, fit.A, fit.alpha) == pytest.approx((2.1, 55.0, 0.3), rel=1e-4)
    assert fit.B == 0.0 and math.isnan(fit.beta) and not fit.two_variable
    assert fit.predict([1e10])[0] == pytest.approx(2.1 + 55.0 * 1e10**-0.3, rel=1e-8)
    record = fit.as_dict()
    assert record["alpha"] == fit.alpha and math.isnan(record["beta_ci_low"])
    assert {"E_ci_low", "A_ci_high", "objective", "n", "n_groups", "delta"} <= set(record)


def test_bootstrap_intervals_cover_the_truth_under_small_noise() -> None:
    """0.5% multiplicative noise on a 7 x 6 grid: every 95% interval holds the true value."""
    n, d = _grid(7, 6)
    rng = np.random.default_rng(1)
    loss = _law(n, d, **TRUE) * np.exp(rng.normal(0.0, 0.005, n.size))
    fit = fit_loss_law(n, d, loss, n_boot=120, seed=0)
    assert len(fit.boot) >= 110
    for name in NAMES:
        lo, hi = getattr(fit, f"{name}_ci")
        assert lo < TRUE[name] < hi, (name, lo, hi)
        assert lo <= getattr(fit, name) <= hi


def test_group_bootstrap_resamples_whole_groups() -> None:
    """Three seeds per point, resampled together: the fit counts 3 units, not 90 points."""
    n, d = _grid()
    rng = np.random.default_rng(2)
    nn, dd = np.tile(n, 3), np.tile(d, 3)
    seeds = np.repeat([0, 1, 2], n.size)
    loss = _law(nn, dd, **TRUE) * np.exp(rng.normal(0.0, 0.003, nn.size))
    fit = fit_loss_law(nn, dd, loss, groups=seeds, n_boot=30)
    assert fit.n == 90 and fit.n_groups == 3
    assert all(np.isfinite(fit.alpha_ci)) and fit.alpha_ci[0] < fit.alpha < fit.alpha_ci[1]


def test_one_gross_outlier_moves_huber_far_less_than_least_squares() -> None:
    """Noiseless data but one loss 50% too high: the Huber fit (delta 1e-3) keeps the law, the
    least-squares fit (delta = inf) is pulled off it."""
    n, d = _grid()
    loss = _law(n, d, **TRUE)
    loss[7] *= 1.5
    robust = fit_loss_law(n, d, loss, n_boot=0)
    squares = fit_loss_law(n, d, loss, n_boot=0, delta=math.inf)

    def shift(fit) -> float:
        return max(abs(getattr(fit, k) / TRUE[k] - 1) for k in NAMES)

    # measured: Huber moves B by 0.23% (the outlier's pull is bounded by delta), least
    # squares moves B by 50% and E by 14%
    assert shift(robust) < 5e-3
    assert shift(squares) > 0.3
    assert shift(robust) < shift(squares) / 50
    clean = np.arange(n.size) != 7  # Huber still predicts the clean points (to 1.1e-4)
    np.testing.assert_allclose(robust.predict(n[clean], d[clean]), loss[clean], rtol=5e-4)
    assert np.max(np.abs(squares.predict(n[clean], d[clean]) / loss[clean] - 1)) > 0.03


def test_held_out_errors_vanish_on_noiseless_data() -> None:
    n, d = _grid()
    check = held_out_check(n, d, _law(n, d, **TRUE))
    assert check.held_out.sum() == 5 and np.all(check.n == 1e10)  # every D at the largest N
    assert check.fit.n == 25
    assert check.max_abs_rel_error < 1e-6
    frame = check.as_frame()
    assert frame.columns == ["n", "d", "loss", "predicted", "rel_error"] and frame.height == 5


def test_held_out_relative_error_equals_the_hand_computed_value() -> None:
    """L(N) = 2 + 100 / sqrt(N) at N = 100 .. 6400; held out: N = 25600 with loss 3.0 where the
    law says 2 + 100 / 160 = 2.625, so the relative error is 2.625 / 3 - 1 = -0.125."""
    n = np.array([100.0, 400.0, 1600.0, 6400.0, 25600.0])
    loss = 2.0 + 100.0 / np.sqrt(n)
    loss[-1] = 3.0
    check = held_out_check(n, None, loss)
    assert check.predicted[0] == pytest.approx(2.625, rel=1e-6)
    assert check.rel_error.tolist() == pytest.approx([-0.125], rel=1e-5)
    mask = np.array([False, False, False, False, True])  # the same point as an explicit mask
    again = held_out_check(n, None, loss, held_out=mask)
    assert again.rel_error.tolist() == pytest.approx([-0.125], rel=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([1e6, 1e7, 1e8], [1e9, 1e9], [3.0, 2.0, 1.5]), "lengths must match"),
        (([1e6, 1e7, 1e8, 0.0], None, [3.0, 2.0, 1.5, 1.2]), "n > 0"),
        (([1e6, 1e7, 1e8, 1e9], None, [3.0, 2.0, -1.5, 1.2]), "loss > 0"),
        (([1e6, 1e7], None, [3.0, 2.0]), "at least 3 points"),
        (([1e6, 1e7, 1e8, 1e9], [1e9, 1e10, 1e9, 1e10], [3, 2, 1.5, 1.4]), "at least 5 points"),
        (([1e6, 1e6, 1e7, 1e7], None, [3.0, 2.9, 2.0, 2.1]), "3 distinct n"),
        (([1e6, 1e7, 1e8, 1e9, 1e10], [1e9] * 5, [3, 2, 1.5, 1.4, 1.3]), "pass d=None"),
    ],
)
def test_bad_inputs_raise_a_clear_value_error(args, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit_loss_law(*args, n_boot=0)


def test_held_out_mask_must_split_the_points() -> None:
    n = np.geomspace(1e5, 1e9, 6)
    with pytest.raises(ValueError, match="boolean mask"):
        held_out_check(n, None, 2 + n**-0.3, held_out=[0, 1, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="leave out some points"):
        held_out_check(n, None, 2 + n**-0.3, held_out=np.zeros(6, dtype=bool))


@given(
    theta=st.tuples(
        st.floats(-1, 1.5), st.floats(0, 25), st.floats(0, 2), st.floats(0, 25), st.floats(0, 2)
    ),
    delta=st.sampled_from([1e-3, 0.1, math.inf]),
)
def test_analytic_gradient_matches_finite_differences(theta, delta) -> None:
    n, d = _grid(3, 3)
    rng = np.random.default_rng(0)
    ln, ld = np.log(n), np.log(d)
    ly = np.log(_law(n, d, **TRUE)) + rng.normal(0, 0.01, n.size)
    x = np.array(theta)
    value, grad = loss_law._value_and_grad(x, ln, ld, ly, delta, 1.0)
    assert value == pytest.approx(float(huber(loss_law._residuals(x, ln, ld, ly)[0], delta).sum()))
    step = 1e-6
    for i in range(5):
        e = np.zeros(5)
        e[i] = step
        up = loss_law._value_and_grad(x + e, ln, ld, ly, delta, 1.0)[0]
        down = loss_law._value_and_grad(x - e, ln, ld, ly, delta, 1.0)[0]
        assert grad[i] == pytest.approx((up - down) / (2 * step), rel=1e-4, abs=1e-6)


def test_huber_is_quadratic_then_linear() -> None:
    r = np.array([0.0, 5e-4, -1e-3, 0.01, -2.0])
    expected = [0.0, 0.5 * 5e-4**2, 0.5 * 1e-6, 1e-3 * (0.01 - 5e-4), 1e-3 * (2.0 - 5e-4)]
    np.testing.assert_allclose(huber(r, 1e-3), expected, rtol=1e-12)
    np.testing.assert_allclose(huber(r, math.inf), 0.5 * r**2)


def _huber_fit_by_brute_force(n, loss, residual) -> np.ndarray:
    """(E, A, alpha) minimising the summed Huber loss (delta 1e-3) of ``residual(pred, loss)``
    for L = E + A / N**alpha: Nelder-Mead on (log E, log A, alpha) from three starts."""

    def objective(p) -> float:
        pred = math.exp(p[0]) + math.exp(p[1]) * n ** -p[2]
        return float(huber(residual(pred, loss), 1e-3).sum())

    best = None
    for x in ([0.4, 6.0, 0.45], [0.0, 4.0, 0.3], [0.8, 8.0, 0.7]):
        for _ in range(3):  # restarts: the simplex stalls on the kinks of the Huber loss
            sol = optimize.minimize(
                objective,
                x,
                method="Nelder-Mead",
                options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000, "maxfev": 20000},
            )
            x = sol.x
        if best is None or sol.fun < best.fun:
            best = sol
    return np.array([math.exp(best.x[0]), math.exp(best.x[1]), best.x[2]])


def test_the_huber_loss_is_on_log_residuals() -> None:
    """Losses from 31 down to 1.5 with 3% noise and the largest 50% too high: the fit is the
    minimum of the Huber loss of log(pred) - log(loss) (brute force here); on raw residuals
    pred - loss the largest loss would dominate and pull alpha to ~0.62."""
    n = np.geomspace(1e3, 1e9, 10)
    loss = (1.5 + 400.0 * n**-0.45) * np.exp(np.random.default_rng(3).normal(0.0, 0.03, 10))
    loss[0] *= 1.5
    expected = _huber_fit_by_brute_force(n, loss, lambda p, y: np.log(p) - np.log(y))
    raw = _huber_fit_by_brute_force(n, loss, lambda p, y: p - y)
    assert np.all(np.abs(raw / expected - 1) > [0.05, 1.0, 0.15])  # the two laws differ clearly
    fit = fit_loss_law(n, None, loss, n_boot=0)
    np.testing.assert_allclose([fit.E, fit.A, fit.alpha], expected, rtol=1e-5)
    assert fit.objective == pytest.approx(
        float(huber(np.log(fit.predict(n)) - np.log(loss), 1e-3).sum()), rel=1e-9
    )


def test_the_fit_runs_blas_on_one_thread_and_restores_it(monkeypatch) -> None:
    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen, fit = [], loss_law._fit
    monkeypatch.setattr(loss_law, "_fit", lambda *a: seen.append(blas_threads()) or fit(*a))
    before = blas_threads()
    n = np.geomspace(1e5, 1e9, 5)
    fit_loss_law(n, None, 2.1 + 55.0 * n**-0.3, n_boot=0)
    assert before and seen == [[1] * len(before)] and blas_threads() == before


@pytest.mark.slow
def test_best_grid_starts_reach_the_full_multistart_optimum() -> None:
    """L-BFGS-B from the 16 best grid points finds the optimum of all 4500 starts (~90 s)."""
    n, d = _grid(7, 6)
    rng = np.random.default_rng(3)
    loss = _law(n, d, **TRUE) * np.exp(rng.normal(0.0, 0.02, n.size))
    quick = fit_loss_law(n, d, loss, n_boot=0)
    full = fit_loss_law(n, d, loss, n_boot=0, n_starts=None)
    assert quick.objective == pytest.approx(full.objective, rel=1e-9)
    for name in NAMES:
        assert getattr(quick, name) == pytest.approx(getattr(full, name), rel=1e-6), name


# --- non-embedding parameter counts ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["learned", "rope", "sinusoidal"])
def test_non_embedding_count_removes_embedding_readout_and_learned_table(kind: str) -> None:
    import equinox as eqx
    import jax

    from rope_lab.config import validate
    from rope_lab.model.factory import make_model
    from rope_lab.model.transformer import count_non_embedding_params, count_params
    from rope_lab.sweep.plan import estimate_cost
    from tests.helpers import tiny_trial

    trial = validate(tiny_trial(kind, width=16, head_dim=4, depth=1))
    model = make_model(trial)
    sizes = {
        jax.tree_util.keystr(path): leaf.size
        for path, leaf in jax.tree_util.tree_leaves_with_path(eqx.filter(model, eqx.is_array))
    }
    # token embedding (V, D) = (24, 16), readout (V, D), the learned table (max_length, D)
    assert sizes[".embedding"] == sizes[".head.weight"] == 24 * 16
    table = sizes.pop(".position.table", 0)
    assert table == (32 * 16 if kind == "learned" else 0)
    by_hand = count_params(model) - sizes[".embedding"] - sizes[".head.weight"] - table
    assert count_non_embedding_params(model) == by_hand
    # the rest is one block (4 D^2 attention, 2 D M MLP with M = 4 D, two LayerNorms) and the
    # final LayerNorm, whatever the encoding
    d, m = 16, 64
    assert by_hand == 4 * d * d + 2 * d * m + 2 * 2 * d + 2 * d
    cost = estimate_cost(trial)
    assert cost["n_params_non_embedding"] == by_hand and cost["n_params"] == count_params(model)


def test_plan_table_shows_non_embedding_params() -> None:
    from rope_lab.sweep.plan import estimate_cost
    from rope_lab.sweep.plan_table import plan_table
    from rope_lab.sweep.spec import parse_spec

    base = {
        "model": {"depth": 1, "head_dim": 8, "position": {"kind": "learned"}},
        "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
        "train": {"length": 16, "batch_size": 8, "steps": 20, "warmup_steps": 2},
        "eval": {"length_multipliers": [1, 2], "batches": 1, "batch_size": 4},
        "ntk": {"enabled": False},
    }
    spec = parse_spec({"name": "t", "base": base, "grid": {"model.width": [16, 64]}})
    lines = plan_table(spec).splitlines()
    header = lines[1].split()
    assert header[header.index("params") + 1] == "non-emb"
    column = header.index("non-emb")
    for trial in spec.trials:
        row = next(line for line in lines if line.startswith(trial.trial_id)).split()
        expected = estimate_cost(trial)["n_params_non_embedding"]
        assert row[column] in (f"{expected / 1e3:.3g}k", f"{expected:.3g}")


def test_trials_rows_without_the_column_still_load(tmp_path) -> None:
    """A trials row written before n_params_non_embedding existed reads it as null."""
    from rope_lab.results import load

    old = tmp_path / "trials" / "old" / "trials"
    old.mkdir(parents=True)
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    pl.DataFrame(
        {"trial_id": ["old"], "status": ["done"], "n_params": [10], "finished_at": [stamp]}
    ).write_parquet(old / "trial.parquet")
    new = tmp_path / "trials" / "new" / "trials"
    new.mkdir(parents=True)
    pl.DataFrame(
        {"trial_id": ["new"], "status": ["done"], "n_params": [10], "n_params_non_embedding": [4]}
    ).write_parquet(new / "trial.parquet")
    trials = load(tmp_path).trials.sort("trial_id").collect()
    assert trials.schema["n_params_non_embedding"] == pl.Int64
    assert trials.get_column("n_params_non_embedding").to_list() == [4, None]


def test_a_law_whose_floor_underflowed_still_warm_starts_a_refit() -> None:
    """A fit with E -> 0 (exp of a very negative log E underflows to 0.0) is a valid law; its
    start vector must stay finite so the held-out refit that starts from it runs."""
    n = np.geomspace(1e4, 1e6, 6)
    fit = fit_loss_law(n, None, 55.0 * n**-0.3, n_boot=0)
    floorless = dataclasses.replace(fit, E=0.0)
    theta = floorless.theta()
    assert np.isfinite(theta).all()
    assert theta[0] == pytest.approx(math.log(sys.float_info.min))
    assert floorless.predict(n) == pytest.approx(fit.predict(n) - fit.E, rel=1e-12)
    check = held_out_check(n, None, 55.0 * n**-0.3, n_starts=4, starts=theta)
    assert check.rel_error == pytest.approx([0.0], abs=1e-3)

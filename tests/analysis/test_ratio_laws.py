"""Loss laws per length ratio, the gap law G = g N^gamma and the joint law, on synthetic tables
whose laws are known."""

from __future__ import annotations

import itertools
import time

import numpy as np
import polars as pl
import pytest

from rope_lab.analysis.curve_labels import corpus_expr
from rope_lab.analysis.gap_law import fit_gap_law
from rope_lab.analysis.loss_law_table import held_out_check
from rope_lab.analysis.query import QueryError
from rope_lab.analysis.ratio_laws import ratio_law_table

SIZES = (1e4, 4e4, 1.6e5, 6.4e5, 2.56e6, 1e7)
RATIOS = (1.0, 2.0, 4.0, 8.0)
BY = ("task.name", "label")


def base_loss(n: float, d: float | None = None) -> float:
    return 1.5 + 30.0 * n**-0.3 + (0.0 if d is None else 300.0 * d**-0.4)


def joint_loss(n: float, r: float, d: float | None = None) -> float:
    """The joint form: E = 1.5 + 0.2 log2 r, alpha = 0.3 - 0.03 log2 r, A = 30 shared."""
    lr = np.log2(r)
    return 1.5 + 0.2 * lr + 30.0 * n ** -(0.3 - 0.03 * lr) + (0 if d is None else 300 * d**-0.4)


def table(
    loss, *, sizes=SIZES, tokens=(1e6,), seeds=(0, 1, 2, 3), ratios=RATIOS, **extra
) -> pl.DataFrame:
    """One row per trial and ratio: ``loss(n, d, r, seed)``."""
    rows = []
    for n, d, s in itertools.product(sizes, tokens, seeds):
        for r in ratios:
            rows.append({"task.name": "lm_text", "label": "rope", "trial_id": f"{n}-{d}-{s}",
                         "train.seed": s, "n_params_non_embedding": n, "tokens_seen": d,
                         "length_ratio": r, "loss": loss(n, d, r, s), **extra})  # fmt: skip
    return pl.DataFrame(rows)


def gap_table(gamma: float, ratios=RATIOS, noise: float = 0.02) -> pl.DataFrame:
    """Gaps 50 log2(r) N^gamma over the 1x law, each with its own seeded noise factor."""
    rng = np.random.default_rng(0)
    keys = itertools.product(SIZES, range(4), ratios)
    noises = {k: 1 + noise * rng.standard_normal() for k in keys}
    return table(lambda n, d, r, s: base_loss(n) + 50 * np.log2(r) * n**gamma * noises[n, s, r],
                 ratios=ratios)  # fmt: skip


@pytest.mark.parametrize(("gamma", "ratios"), [(-0.25, RATIOS), (0.1, (1.0, 4.0))])
def test_the_gap_exponent_is_recovered_within_its_seed_interval(gamma: float, ratios) -> None:
    out = ratio_law_table(gap_table(gamma, ratios), by=BY, n_boot=300)
    assert out.get_column("length_ratio").to_list() == list(ratios)
    at_one = out.row(0, named=True)
    assert at_one["gamma"] is None and at_one["gap_error"] is None
    for row in out.iter_rows(named=True):
        if row["length_ratio"] == 1.0:
            continue
        assert row["gap_error"] is None and row["gap_points"] == 24 and row["gap_nonpositive"] == 0
        assert row["gamma_ci_low"] <= gamma <= row["gamma_ci_high"], row
        assert row["gamma"] == pytest.approx(gamma, abs=0.02)
        assert row["gap_g"] == pytest.approx(50 * np.log2(row["length_ratio"]), rel=0.2)
        # the sign of the exponent is decided: shrinking gaps below 0, growing above
        assert (row["gamma_ci_high"] < 0) if gamma < 0 else (row["gamma_ci_low"] > 0)


def test_the_gap_law_is_least_squares_in_log_log() -> None:
    n = np.array([1e4, 1e5, 1e6, 1e4, 1e5, 1e6])
    gap = np.array([0.9, 0.4, 0.21, 1.1, 0.38, 0.19])
    fit = fit_gap_law(n, gap, groups=[0, 0, 0, 1, 1, 1], n_boot=0)
    slope, intercept = np.polyfit(np.log(n), np.log(gap), 1)
    assert (fit.gamma, fit.g) == pytest.approx((slope, np.exp(intercept)), rel=1e-12)
    assert np.isnan(fit.gamma_ci[0]) and fit.n_groups == 2  # 2 seeds: no interval
    assert fit.predict([1e5])[0] == pytest.approx(np.exp(intercept) * 1e5**slope)


def test_a_gap_at_or_below_zero_refuses_the_fit_with_the_count() -> None:
    n = [1e4, 1e5, 1e6, 1e4, 1e5, 1e6]
    with pytest.raises(ValueError) as info:
        fit_gap_law(n, [0.5, 0.2, 0.0, 0.6, 0.1, -0.01])
    assert str(info.value) == (
        "gap fit refused: 2 of 6 gaps are <= 0 (at N = 1e+06); a power law g N^gamma "
        "needs every gap > 0"
    )
    with pytest.raises(
        ValueError, match=r"^gap fit needs at least 3 distinct N, got 2 \(4 gaps\)$"
    ):
        fit_gap_law([1e4, 1e5, 1e4, 1e5], [0.5, 0.2, 0.4, 0.3])
    # in the table: the row keeps its law and says why it has no gap law
    flat = table(lambda n, d, r, s: base_loss(n) - 0.01 * (r > 1) * (n == SIZES[-1]))
    row = ratio_law_table(flat, by=BY, n_boot=0).row(1, named=True)
    assert row["error"] is None and row["gamma"] is None and row["gap_nonpositive"] == 24
    assert row["gap_error"].startswith("gap fit refused: 24 of 24 gaps are <= 0")


@pytest.mark.parametrize("tokens", [(1e6,), (1e6, 2e6, 4e6, 8e6)])
def test_held_out_errors_vanish_on_a_table_from_the_joint_law(tokens) -> None:
    """Noiseless losses of the joint form: each ratio's own law and the joint law both predict
    the held-out models (largest N, and with 4 token counts the largest D) to ~0, and the
    joint fit recovers E(r), alpha(r) linear in log2 r."""
    two = len(tokens) > 1
    frame = table(lambda n, d, r, s: joint_loss(n, r, d if two else None), tokens=tokens,
                  seeds=(0,))  # fmt: skip
    out = ratio_law_table(frame, by=BY, n_boot=0)
    assert out.get_column("law").unique().to_list() == ["L(N, D)" if two else "L(N)"]
    # held out: every point at the largest N (one per D), and with D the largest D's too
    expected = len(tokens) + (len(SIZES) - 1 if two else 0)
    assert out.get_column("heldout_points").to_list() == [expected] * len(RATIOS)
    assert out.get_column("heldout_max_rel_error").max() < 1e-4
    assert out.get_column("joint_heldout_max_rel_error").max() < 1e-6
    row = out.row(2, named=True)
    assert row["alpha"] == pytest.approx(0.3 - 0.03 * 2, abs=1e-4)
    assert row["E"] == pytest.approx(1.5 + 0.2 * 2, abs=1e-3)
    joint = (row["joint_E0"], row["joint_E1"], row["joint_A"], row["joint_alpha0"])
    assert joint == pytest.approx((1.5, 0.2, 30.0, 0.3), rel=1e-5)
    assert row["joint_alpha1"] == pytest.approx(-0.03, rel=1e-5)
    if two:
        assert (row["joint_B"], row["joint_beta"]) == pytest.approx((300.0, 0.4), rel=1e-5)


def test_the_joint_law_misses_where_the_separate_laws_do_not() -> None:
    """Gaps that are not linear in log2 r (only 8x shifts): the joint form cannot follow, so
    its held-out error exceeds that of the separate laws, which stay exact."""
    frame = table(lambda n, d, r, s: base_loss(n) + 0.5 * (r == 8.0), seeds=(0,))
    out = ratio_law_table(frame, by=BY, n_boot=0)
    assert out.get_column("heldout_max_rel_error").max() < 1e-4
    assert out.get_column("joint_heldout_max_rel_error").max() > 1e-2


def test_too_few_distinct_n_or_d_are_refused_with_the_counts() -> None:
    few_n = table(lambda n, d, r, s: base_loss(n), sizes=SIZES[:2])
    errors = ratio_law_table(few_n, by=BY, n_boot=0).get_column("error").unique().to_list()
    assert errors == ["2 distinct N (32 rows): a loss law needs at least 3"]
    two_d = table(lambda n, d, r, s: base_loss(n, d), tokens=(1e6, 4e6), seeds=(0,))
    errors = ratio_law_table(two_d, by=BY, n_boot=0).get_column("error").unique().to_list()
    assert errors == [
        "D takes 2 distinct values (1e+06, 4e+06): L(N, D) needs at least 3, L(N) one"
    ]
    three_n = table(lambda n, d, r, s: base_loss(n), sizes=SIZES[:3])
    row = ratio_law_table(three_n, by=BY, n_boot=0).row(0, named=True)
    assert row["error"] is None and row["heldout_max_rel_error"] is None
    assert row["heldout_error"] == (
        "held-out fit: loss-law fit needs at least 3 distinct n values, got [10000.0, 40000.0]"
    )


def test_different_tasks_or_corpora_in_one_fit_are_refused() -> None:
    one = table(lambda n, d, r, s: base_loss(n), seeds=(0,))
    other = one.with_columns(pl.lit("copy").alias("task.name"), pl.col("trial_id") + "c")
    with pytest.raises(QueryError) as info:
        ratio_law_table(pl.concat([one, other]), by=("label",), n_boot=0)
    assert str(info.value) == (
        "loss laws by ratio: group label=rope pools 2 tasks (copy: 6 trials, lm_text: 6 "
        "trials); add task.name to --by"
    )
    params = '[["path", "{}"]]'
    byte = one.with_columns(pl.lit(params.format("bytes.txt")).alias("task.params"))
    bpe = byte.with_columns(pl.lit(params.format("bpe")).alias("task.params"),
                            pl.col("trial_id") + "b")  # fmt: skip
    mixed = pl.concat([byte, bpe]).with_columns(bits_per_byte=pl.col("loss") / 2)
    with pytest.raises(QueryError) as info:
        ratio_law_table(mixed, by=BY, n_boot=0)
    assert str(info.value) == (
        "loss laws by ratio: group task.name=lm_text, label=rope pools 2 corpora in loss "
        "(bpe: 6 trials, bytes.txt: 6 trials); add corpus to --by"
    )
    # two methods' rows of the same trials in one group are refused, not averaged
    scaled = one.with_columns(pl.lit("rope/yarn x4").alias("label"))
    with pytest.raises(QueryError) as info:
        ratio_law_table(pl.concat([one, scaled]), by=("task.name",), n_boot=0)
    assert str(info.value) == (
        "loss laws by ratio: trial 10000.0-1000000.0-0 has 2 rows at length ratio 1 in one "
        "group (24 such trial-ratio pairs: several methods, factors or fine-tunings); add "
        "label to the group columns"
    )
    # bits per byte puts both tokenizers on one scale, but not on one curve: still refused
    with pytest.raises(QueryError, match="pools 2 corpora in bits_per_byte"):
        ratio_law_table(mixed, by=BY, y="bits_per_byte", n_boot=0)
    # one fit per corpus: the corpus as a group column
    out = ratio_law_table(mixed.with_columns(corpus_expr(mixed.columns)), by=(*BY, "corpus"),
                          y="bits_per_byte", n_boot=0)  # fmt: skip
    assert out.get_column("n_trials").to_list() == [6] * 2 * len(RATIOS)


def test_the_warm_started_held_out_fit_matches_sixteen_grid_starts() -> None:
    """The held-out fit starts from the full fit's optimum and 4 grid points; on this noisy
    table its errors equal those of `held_out_check` from Hoffmann's 16 best grid points."""
    frame = gap_table(-0.25)
    out = ratio_law_table(frame, by=BY, n_boot=0)
    for r, error in zip(RATIOS, out.get_column("heldout_max_rel_error"), strict=True):
        at = frame.filter(pl.col("length_ratio") == r)
        n = at.get_column("n_params_non_embedding").to_numpy()
        check = held_out_check(n, None, at.get_column("loss").to_numpy(), n_starts=16)
        assert error == pytest.approx(check.max_abs_rel_error, rel=1e-5)


def two_hundred_trials() -> pl.DataFrame:
    """200 trials (2 labels x 5 N x 4 D x 5 seeds) at 4 ratios, gaps shrinking as N^-0.25."""
    rng = np.random.default_rng(1)
    parts = []
    for label in ("rope", "alibi"):
        noise = rng.normal(1.0, 0.005, size=1000)
        part = table(
            lambda n, d, r, s, noise=noise: (base_loss(n, d) + 5 * np.log2(r) * n**-0.25)
            * noise[int(np.log2(n / 1e4) * 40 + np.log2(d / 1e6) * 8 + s * 2 + np.log2(r))],
            sizes=(1e4, 4e4, 1.6e5, 6.4e5, 2.56e6), tokens=(1e6, 2e6, 4e6, 8e6),
            seeds=range(5),
        )  # fmt: skip
        parts.append(part.with_columns(pl.lit(label).alias("label"), pl.col("trial_id") + label))
    return pl.concat(parts)


@pytest.mark.slow
def test_two_hundred_trials_are_fitted_in_under_ten_seconds() -> None:
    """CPU seconds of this process (the fit runs on one thread): wall time on a shared machine
    measures the other users too (3.0 s of CPU took 12 s of wall at a load average of 19)."""
    frame = two_hundred_trials()
    assert frame.get_column("trial_id").n_unique() == 200
    start = time.process_time()
    out = ratio_law_table(frame, by=BY, n_boot=200)
    elapsed = time.process_time() - start
    assert elapsed < 10, elapsed
    assert out.height == 8 and out.get_column("error").null_count() == 8
    gammas = out.get_column("gamma").drop_nulls().to_numpy()
    assert gammas == pytest.approx(-0.25, abs=0.03)


def test_a_ratio_without_the_largest_model_says_why_it_has_no_joint_held_out_error() -> None:
    frame = table(lambda n, d, r, s: joint_loss(n, r), seeds=(0,))
    frame = frame.filter(
        ~((pl.col("length_ratio") == 8.0) & (pl.col("n_params_non_embedding") == SIZES[-1]))
    )
    out = ratio_law_table(frame, by=BY, n_boot=0)
    last = out.row(3, named=True)
    assert last["heldout_max_rel_error"] < 1e-4 and last["joint_heldout_max_rel_error"] is None
    assert last["joint_error"] == "no held-out point at this ratio (it lacks the largest N or D)"
    assert out.get_column("joint_heldout_max_rel_error").head(3).max() < 1e-6

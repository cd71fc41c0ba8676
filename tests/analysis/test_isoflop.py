"""IsoFLOP profiles and the frontier recover the compute-optimal allocation of a known loss law
L(N, D) = E + A / N^alpha + B / D^beta sampled at C = 6 N D, whose optimum has the closed form
N*(C) = G (C / 6)^(beta / (alpha + beta)), G = (alpha A / (beta B))^(1 / (alpha + beta))."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from rope_lab.analysis.curve_labels import corpus_expr
from rope_lab.analysis.isoflop import (
    compute_buckets,
    fit_frontier,
    fit_profile,
    isoflop_tables,
)
from rope_lab.analysis.query import QueryError

E, A, B = 1.69, 406.4, 410.7
BUDGETS = (1e17, 1e18, 1e19, 1e20)


def n_opt(c: float, alpha: float, beta: float) -> float:
    """Closed-form compute-optimal N of the law at compute c."""
    g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    return g * (c / 6) ** (beta / (alpha + beta))


def law_rows(
    alpha: float, beta: float, *, noise: float, seeds: int = 4, step: float = 0.3, jitter=0.0
) -> pl.DataFrame:
    """One row per trial: 7 sizes log-spaced (by ``step``) around N*(C) per budget, ``seeds``
    seeds with Gaussian loss noise; ``jitter`` spreads each trial's C by up to that fraction."""
    rng = np.random.default_rng(0)
    rows = []
    for c in BUDGETS:
        for k in range(-3, 4):
            n = n_opt(c, alpha, beta) * math.exp(step * k)
            for s in range(seeds):
                d = c * (1 + jitter * rng.uniform()) / (6 * n)
                loss = E + A / n**alpha + B / d**beta + rng.normal(0, noise)
                rows.append(
                    {
                        "task.name": "lm",
                        "label": "rope",
                        "length_ratio": 1.0,
                        "train.seed": s,
                        "trial_id": f"{c:g}-{k}-{s}",
                        "n_params_non_embedding": n,
                        "tokens_seen": d,
                        "loss": loss,
                    }
                )
    return pl.DataFrame(rows)


def test_noiseless_symmetric_law_gives_exact_minima_and_exponent() -> None:
    """alpha = beta: the profile is symmetric in log N about N*, so a parabola fitted on sizes
    symmetric about it has its vertex exactly there, and a = b = 1/2."""
    profiles, frontier = isoflop_tables(law_rows(0.3, 0.3, noise=0.0, seeds=1), n_boot=0)
    want = [n_opt(c, 0.3, 0.3) for c in BUDGETS]
    assert profiles.get_column("compute").to_list() == pytest.approx(BUDGETS, rel=1e-12)
    assert profiles.get_column("n_star").to_list() == pytest.approx(want, rel=1e-9)
    d_star = [c / (6 * n) for c, n in zip(BUDGETS, want, strict=True)]
    assert profiles.get_column("d_star").to_list() == pytest.approx(d_star, rel=1e-9)
    row = frontier.row(0, named=True)
    assert row["compute_source"] == "6 N D (N = n_params_non_embedding, D = tokens_seen)"
    assert (row["n_profiles"], row["error"]) == (4, None)
    assert row["a"] == pytest.approx(0.5, abs=1e-9)
    assert row["b"] == pytest.approx(0.5, abs=1e-9)


def test_noisy_minima_within_their_seed_intervals() -> None:
    profiles, frontier = isoflop_tables(law_rows(0.3, 0.3, noise=0.003), n_boot=300)
    for c, lo, hi in profiles.select("compute", "n_star_ci_low", "n_star_ci_high").iter_rows():
        assert lo < n_opt(c, 0.3, 0.3) < hi
        assert hi / lo < 1.1  # the interval means something
    row = frontier.row(0, named=True)
    assert row["a_ci_low"] < 0.5 < row["a_ci_high"]
    assert (row["b_ci_low"], row["b_ci_high"]) == pytest.approx(
        (1 - row["a_ci_high"], 1 - row["a_ci_low"])
    )


def test_frontier_exponent_recovers_beta_over_alpha_plus_beta() -> None:
    """alpha != beta (Hoffmann's fit): the parabola's vertex is off N* by the same factor at
    every C (the profile's shape in log N does not depend on C), so a is unbiased."""
    alpha, beta = 0.34, 0.28
    profiles, frontier = isoflop_tables(law_rows(alpha, beta, noise=0.003), n_boot=300)
    row = frontier.row(0, named=True)
    assert row["a_ci_low"] < beta / (alpha + beta) < row["a_ci_high"]
    assert row["b_ci_low"] < alpha / (alpha + beta) < row["b_ci_high"]
    assert row["a_ci_high"] - row["a_ci_low"] < 0.02
    ratio = profiles.get_column("n_star").to_numpy() / [n_opt(c, alpha, beta) for c in BUDGETS]
    assert np.all(np.abs(ratio - 1) < 0.03)


def test_compute_within_tolerance_forms_one_profile() -> None:
    jittered = law_rows(0.3, 0.3, noise=0.0, seeds=2, jitter=0.05)
    profiles, _ = isoflop_tables(jittered, n_boot=0)
    assert profiles.height == 4 and set(profiles.get_column("n_points")) == {14}
    buckets = compute_buckets([1.0, 1.05, 1.2, 4.0, 3.9])
    assert buckets.tolist() == pytest.approx([1.05**0.5] * 2 + [1.2, 3.9**0.5 * 2.0, 3.9**0.5 * 2])
    with pytest.raises(ValueError, match="compute must be finite and positive"):
        compute_buckets([1.0, 0.0])


def test_refused_profiles_name_why() -> None:
    two = fit_profile(1e18, [1e6, 1e6, 2e6], [3.0, 3.1, 2.9])
    assert two.error == "2 distinct N; a parabola in log N needs at least 3"
    assert math.isnan(two.n_star)
    edge = fit_profile(1e18, [1e6, 2e6, 4e6], [3.0, 2.5, 2.1])  # still falling at the largest N
    assert edge.error is not None and edge.error.startswith("minimum N*=")
    assert edge.error.endswith("outside the sampled N range [1e+06, 4e+06]")
    cap = fit_profile(1e18, [1e6, 2e6, 4e6], [3.0, 3.5, 3.0])
    assert cap.error == "the parabola in log N opens downward (no minimum)"
    frontier = fit_frontier([two, edge, cap])
    assert (
        frontier["error"] == "0 accepted profile(s); the frontier needs at least 2 compute budgets"
    )


def test_single_seed_has_no_interval_and_missing_columns_are_named() -> None:
    profiles, frontier = isoflop_tables(law_rows(0.3, 0.3, noise=0.001, seeds=1), n_boot=50)
    assert profiles.get_column("n_star_ci_low").is_nan().all()
    assert frontier.get_column("a_ci_low").is_nan().all()
    with pytest.raises(ValueError, match=r"isoflop: no column\(s\) \['tokens_seen'\]"):
        isoflop_tables(pl.DataFrame({"n_params_non_embedding": [1.0], "loss": [1.0]}), by=())


def test_a_recorded_flops_column_is_the_compute() -> None:
    rows = law_rows(0.3, 0.3, noise=0.0, seeds=1)
    doubled = rows.with_columns(
        train_flops=12.0 * pl.col("n_params_non_embedding") * pl.col("tokens_seen")
    )
    profiles, frontier = isoflop_tables(doubled, flops="train_flops", n_boot=0)
    assert profiles.get_column("compute").to_list() == pytest.approx([2 * c for c in BUDGETS])
    assert profiles.get_column("n_star").to_list() == pytest.approx(
        [n_opt(c, 0.3, 0.3) for c in BUDGETS], rel=1e-9
    )
    assert frontier.get_column("compute_source").to_list() == ["column train_flops"]


def test_two_corpora_in_one_profile_are_refused_and_split_by_their_corpus() -> None:
    """A byte-level and a BPE model of one text are two tasks even in bits per byte: a group
    that pools them is refused naming the counts; grouped by `corpus` each gets its own
    frontier (here the same law, so the same exponent)."""
    rows = law_rows(0.3, 0.3, noise=0.0, seeds=1)
    bytes_, bpe = (f'[["path", "corpora/{name}"]]' for name in ("bytes", "bpe"))
    mixed = pl.concat(
        [
            rows.with_columns(pl.lit(bytes_).alias("task.params")),
            rows.with_columns(pl.lit(bpe).alias("task.params"), pl.col("trial_id") + "-bpe"),
        ]
    )
    with pytest.raises(QueryError) as info:
        isoflop_tables(mixed, n_boot=0)
    assert str(info.value) == (
        "isoflop: group task.name=lm, label=rope, length_ratio=1.0 pools 2 corpora in loss "
        "(corpora/bpe: 28 trials, corpora/bytes: 28 trials); add corpus to --by"
    )
    split = mixed.with_columns(corpus_expr(mixed.columns))
    _, frontier = isoflop_tables(split, by=("task.name", "corpus", "label", "length_ratio"),
                                 n_boot=0)  # fmt: skip
    assert sorted(frontier.get_column("corpus").to_list()) == ["corpora/bpe", "corpora/bytes"]
    assert frontier.get_column("a").to_list() == pytest.approx([0.5, 0.5], abs=1e-9)


def test_the_corpus_column_is_the_path_of_a_text_task_and_null_elsewhere() -> None:
    frame = pl.DataFrame({"task.params": ['[["path", "builtin:python-source"]]', "[]", None]})
    got = frame.select(corpus_expr(frame.columns)).get_column("corpus").to_list()
    assert got == ["builtin:python-source", None, None]
    no_params = pl.DataFrame({"task.name": ["passkey"]})
    assert no_params.select(corpus_expr(no_params.columns)).item() is None

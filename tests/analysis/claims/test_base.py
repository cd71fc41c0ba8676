"""Verdict machinery: the seed bootstrap, the decision rule, and the seed requirement."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.analysis.claims import bootstrap, decide, judge
from rope_lab.analysis.claims.base import judge_arms, per_seed
from rope_lab.registry import CLAIMS
from tests.analysis.claims.common import evidence, trial_rows


def diff(m):
    return m["a"] - m["b"]


def test_bootstrap_point_is_the_statistic_of_the_means() -> None:
    point, lo, hi = bootstrap({"a": [1.0, 2.0, 6.0], "b": [0.5, 1.5]}, diff, n_boot=200)
    assert point == pytest.approx(3.0 - 1.0)
    assert lo is not None and hi is not None and lo <= point <= hi
    # the extreme resamples bound the interval: a's mean in [1, 6], b's in [0.5, 1.5]
    assert lo >= 1.0 - 1.5 and hi <= 6.0 - 0.5


def test_bootstrap_without_spread_or_with_one_seed() -> None:
    assert bootstrap({"a": [2.0, 2.0], "b": [1.0, 1.0]}, diff) == (1.0, 1.0, 1.0)
    assert bootstrap({"a": [2.0], "b": [1.0, 3.0]}, diff) == (0.0, None, None)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=2, max_size=6),
    st.lists(st.floats(-5, 5), min_size=2, max_size=6),
    st.floats(-3, 3),
)
def test_bootstrap_interval_shifts_with_the_data(a, b, shift) -> None:
    """Adding c to every value of arm a moves the point and both ends by c (same resamples)."""
    p0, lo0, hi0 = bootstrap({"a": a, "b": b}, diff, n_boot=50, seed=3)
    p1, lo1, hi1 = bootstrap({"a": [x + shift for x in a], "b": b}, diff, n_boot=50, seed=3)
    assert p1 == pytest.approx(p0 + shift, abs=1e-9)
    assert lo1 == pytest.approx(lo0 + shift, abs=1e-9)
    assert hi1 == pytest.approx(hi0 + shift, abs=1e-9)


@pytest.mark.parametrize(
    ("low", "high", "direction", "expected"),
    [
        (0.1, 0.5, ">", "holds"),
        (-0.5, -0.1, ">", "fails"),
        (-0.1, 0.5, ">", "inconclusive"),
        (-0.5, 0.0, ">", "fails"),
        (0.0, 0.5, ">", "inconclusive"),
        (-0.5, -0.1, "<", "holds"),
        (0.1, 0.5, "<", "fails"),
        (-0.1, 0.1, "<", "inconclusive"),
        (None, None, ">", "inconclusive"),
    ],
)
def test_decide(low, high, direction, expected) -> None:
    assert decide(low, high, 0.0, direction) == expected


def test_seed_requirement() -> None:
    ev = evidence(trial_rows("alibi", 0, {1: 1.0}))
    meta = CLAIMS["absolute_degrade_more"]
    one = judge_arms(ev, meta, "s", {"a": [2.0], "b": [1.0]}, diff, threshold=0, direction=">")
    assert one.verdict == "inconclusive" and "1 seed" in one.reason and one.effect == 1.0
    ev.min_seeds = 1
    point = judge_arms(ev, meta, "s", {"a": [2.0], "b": [1.0]}, diff, threshold=0, direction=">")
    assert point.verdict == "holds" and point.ci_low is None
    two = judge_arms(
        ev, meta, "s", {"a": [2.0, 2.2], "b": [1.0, 1.1]}, diff, threshold=0, direction=">"
    )
    assert two.verdict == "holds" and two.effect == pytest.approx(1.05)
    assert two.numbers == {"a": pytest.approx(2.1), "b": pytest.approx(1.05)}


def test_per_seed_averages_trials_of_one_seed() -> None:
    import polars as pl

    frame = pl.DataFrame({"train.seed": [1, 0, 1], "value": [1.0, 5.0, 3.0]})
    assert per_seed(frame) == [5.0, 2.0]
    assert per_seed(pl.DataFrame({"train.seed": [0, 1], "value": [np.nan, 2.0]})) == [2.0]


# Arms whose bootstrap distribution is known exactly: every resample of a's 3 seeds and b's 2
# is equally likely (27 x 4), and the exact quantiles at 2.5/5/95/97.5% sit >= 0.012 in
# probability from any jump of the distribution, so 20000 resamples land on them.
EXACT_ARMS = {"a": [0.0, 9.0, 13.0], "b": [0.0, 9.0]}


def _exact_quantile(arms, stat, q: float) -> float:
    """The smallest value x of ``stat`` over resampled means with P(stat <= x) >= q."""
    values = []
    for a in itertools.product(arms["a"], repeat=len(arms["a"])):
        for b in itertools.product(arms["b"], repeat=len(arms["b"])):
            values.append(stat({"a": sum(a) / len(a), "b": sum(b) / len(b)}))
    ordered = np.sort(values)
    return float(ordered[math.ceil(q * len(ordered) - 1e-9) - 1])


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_bootstrap_interval_is_the_exact_percentile_interval_at_its_level(level) -> None:
    lo, hi = (_exact_quantile(EXACT_ARMS, diff, q) for q in (0.5 - level / 2, 0.5 + level / 2))
    point, blo, bhi = bootstrap(EXACT_ARMS, diff, n_boot=20000, level=level)
    assert point == pytest.approx(22 / 3 - 4.5)
    assert (blo, bhi) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))
    assert (lo, hi) == pytest.approx((-6.0, 35 / 3) if level == 0.95 else (-14 / 3, 31 / 3))


def test_the_verdict_is_decided_on_the_reported_95_percent_interval() -> None:
    """Thresholds a hair either side of the reported ends: a verdict decided on a narrower
    (or wider) interval than the one reported flips on one of them."""
    ev = evidence(trial_rows("alibi", 0, {1: 1.0}))
    ev.n_boot = 20000
    assert ev.level == 0.95
    meta = CLAIMS["absolute_degrade_more"]
    low, high = (_exact_quantile(EXACT_ARMS, diff, q) for q in (0.025, 0.975))
    assert _exact_quantile(EXACT_ARMS, diff, 0.05) > low + 1  # 90%: strictly inside
    assert _exact_quantile(EXACT_ARMS, diff, 0.95) < high - 1

    def judged(threshold: float, direction: str):
        v = judge_arms(ev, meta, "s", EXACT_ARMS, diff, threshold=threshold, direction=direction)
        assert (v.ci_low, v.ci_high) == (pytest.approx(low), pytest.approx(high))
        assert v.verdict == decide(v.ci_low, v.ci_high, threshold, direction)
        return v.verdict

    eps = 1e-6
    assert judged(low - eps, ">") == "holds"
    assert judged(low + eps, ">") == "inconclusive"
    assert judged(high + eps, ">") == "fails"
    assert judged(high - eps, ">") == "inconclusive"
    assert judged(high + eps, "<") == "holds"
    assert judged(high - eps, "<") == "inconclusive"
    assert judged(low - eps, "<") == "fails"
    assert judged(low + eps, "<") == "inconclusive"


@pytest.fixture(scope="module")
def one_encoding() -> object:
    """ALiBi alone, two seeds, at 1x and 2x: what most claims lack an arm for."""
    rows = [r for s in (0, 1) for r in trial_rows("alibi", s, {1: 1.0 + 0.01 * s, 2: 1.1})]
    return evidence(rows)


@pytest.mark.parametrize("name", CLAIMS.names())
def test_every_claim_gives_named_verdicts_and_says_what_it_lacks(name: str, one_encoding) -> None:
    """Every registered claim: a statement and a source, and on runs that lack some of its arms
    verdicts under its own name, each holds / fails / inconclusive, an inconclusive one with the
    reason, an effect inside its interval."""
    meta = CLAIMS[name]
    assert meta.name == name and meta.statement and meta.source
    verdicts = judge(one_encoding, [name])
    assert verdicts
    for v in verdicts:
        assert v.claim == name and v.source == meta.source and v.statement  # per scope
        assert v.verdict in ("holds", "fails", "inconclusive")
        assert v.verdict != "inconclusive" or v.reason, v
        if v.effect is not None and v.ci_low is not None and v.ci_high is not None:
            assert v.ci_low <= v.effect <= v.ci_high, v


def test_aligned_lines_pads_each_column_to_its_widest_cell():
    from rope_lab.analysis.claims.base import aligned_lines

    assert aligned_lines(["a", "bbb"], [["xx", "y"], ["z", "wwww"]]) == [
        "a   bbb ",
        "--  ----",
        "xx  y   ",
        "z   wwww",
    ]

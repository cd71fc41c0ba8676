"""Verdict machinery: the seed bootstrap, the decision rule, and the seed requirement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.analysis.claims import bootstrap, decide
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

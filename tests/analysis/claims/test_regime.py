"""Kernel-regime claims on hand-made rows: lazy twins, kernel predictions, NNGP, CNN."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.analysis.claims import judge
from rope_lab.analysis.claims.regime import ranks, spearman
from tests.analysis.claims.common import L, by_scope, evidence, trial_rows

LAZY = {"train.regime": "lazy"}


def ntk(kind, seed, metric, values_by_probe, *, step=100, config=None, kernel="ntk", width=64):
    """NTK rows of one trial: probe length -> value at ``step``."""
    trial = trial_rows(kind, seed, {1: 1.0}, config={"model.width": width, **(config or {})})[0]
    keep = {k: trial[k] for k in trial if k.startswith(("model.", "train.", "task."))}
    return [
        {**keep, "trial_id": f"{trial['trial_id']}-w{width}", "status": "done", "step": step,
         "probe_length": probe, "group": "total", "metric": metric, "value": value,
         "method": "none", "factor": 1.0, "kernel": kernel}
        for probe, value in values_by_probe.items()
    ]  # fmt: skip


def test_ranks_average_ties_and_spearman_is_pearson_of_ranks() -> None:
    assert ranks([3.0, 1.0, 2.0, 2.0]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=3, max_size=8).filter(
        lambda p: len({a for a, _ in p}) > 1 and len({b for _, b in p}) > 1
    )
)
def test_spearman_is_pearson_of_ranks_and_monotone_invariant(pairs) -> None:
    a, b = (np.array(x, dtype=float) / 10 for x in zip(*pairs, strict=True))
    expected = np.corrcoef(ranks(a), ranks(b))[0, 1]
    assert spearman(a, b) == pytest.approx(expected, abs=1e-9)
    assert spearman(np.exp(a), b) == pytest.approx(expected, abs=1e-9)


def _lazy_world(rises: dict[str, float], cosines: dict[str, float], seeds=(0, 1)):
    rows, kernel = [], []
    for s in seeds:
        for kind, rise in rises.items():
            rows += trial_rows(kind, s, {1: 1.0, 4: 1.0 + rise + 0.01 * s}, config=LAZY)
            rows += trial_rows(kind, s, {1: 1.0, 4: 1.1}, config={"train.regime": "rich"})
            kernel += ntk(kind, s, "tail_cos_mean", {4 * L: cosines[kind]}, config=LAZY)
    return rows, kernel


def test_lazy_collapse_is_the_rank_correlation_over_encodings() -> None:
    rises = {"learned": 2.0, "sinusoidal": 1.5, "rope": 0.5, "alibi": 0.2}
    cosines = {"learned": 0.1, "sinusoidal": 0.3, "rope": 0.8, "alibi": 0.7}
    v = judge(evidence(*_lazy_world(rises, cosines)), ["lazy_collapses_where_kernel_vanishes"])
    (v,) = v
    expected = spearman(list(rises.values()), list(cosines.values()))  # -0.8 by hand
    assert expected == pytest.approx(-0.8)
    assert v.scope == "copy @ 4x" and v.effect == pytest.approx(expected)
    assert v.verdict == "holds" and v.direction == "<"
    assert v.numbers["rise:learned +lazy"] == pytest.approx(2.005)
    three = {k: rises[k] for k in ("learned", "rope")}
    (v,) = judge(evidence(*_lazy_world(three, cosines)), ["lazy_collapses_where_kernel_vanishes"])
    assert v.verdict == "inconclusive" and ">= 3 encodings" in v.reason


def test_features_rescue_compares_each_encoding_with_its_twin() -> None:
    rises = {"learned": 2.0, "rope": 0.05}
    rows, kernel = _lazy_world(rises, {"learned": 0.1, "rope": 0.9})
    verdicts = by_scope(judge(evidence(rows, kernel), ["features_rescue_extrapolation"]))
    learned, rope = verdicts["copy @ 4x: learned"], verdicts["copy @ 4x: rope"]
    # rich rise 0.1 for both; lazy rise 2.005 and 0.055 (seed means)
    assert learned.effect == pytest.approx(2.005 - 0.1) and learned.verdict == "holds"
    assert rope.effect == pytest.approx(0.055 - 0.1) and rope.verdict == "fails"


def test_kernel_prediction_error_slope_over_width() -> None:
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1, 2):
        for w in (32, 64, 128):
            err = 0.8 * (w / 32) ** -1.0 * (1 + 0.01 * s)
            kernel += ntk("rope", s, "kernel_prediction_error_init", {4 * L: err}, width=w,
                          config={"model.parametrization": "ntk"})  # fmt: skip
            lazy = {"model.parametrization": "ntk", **LAZY}  # a lazy twin is left out
            kernel += ntk("rope", s, "kernel_prediction_error_init", {4 * L: 1.0}, width=w,
                          config=lazy)  # fmt: skip
    verdicts = judge(evidence(rows, kernel), ["kernel_predicts_network_at_width"])
    assert [v.scope for v in verdicts] == ["copy: rope"]
    assert verdicts[0].effect == pytest.approx(-1.0, abs=1e-6)
    assert verdicts[0].verdict == "holds"


def test_tail_outputs_stay_at_init_margin() -> None:
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1):
        kernel += ntk("learned", s, "tail_movement", {4 * L: 0.2 + 0.02 * s, 2 * L: 5.0})
        kernel += ntk("sinusoidal", s, "tail_movement", {4 * L: 0.3})
        kernel += ntk("rope", s, "tail_movement", {4 * L: 0.9})
        kernel += ntk("alibi", s, "tail_movement", {4 * L: 1.1})
    (v,) = judge(evidence(rows, kernel), ["tail_outputs_stay_at_init"])
    absolute, relative = (0.21 + 0.3) / 2, 1.0
    assert v.numbers == {"absolute": pytest.approx(absolute), "relative": pytest.approx(relative)}
    assert v.effect == pytest.approx(min(1 - absolute, relative - absolute))
    assert v.verdict == "holds"


def test_nngp_drop_against_ntk_drop_at_init() -> None:
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1):
        for kind in ("rope", "learned"):
            kernel += ntk(kind, s, "tail_cos_mean", {L: 1.0, 2 * L: 0.8, 4 * L: 0.4}, step=0)
            kernel += ntk(kind, s, "tail_cos_mean", {2 * L: 0.0, 4 * L: 0.0}, step=100)  # late
            kernel += ntk(kind, s, "tail_cos_mean", {2 * L: 0.9, 4 * L: 0.85 - 0.01 * s},
                          step=0, kernel="nngp")  # fmt: skip
    (v,) = judge(evidence(rows, kernel), ["nngp_stabler_than_ntk"])
    assert v.numbers == {"ntk": pytest.approx(0.4), "nngp": pytest.approx(0.055)}
    assert v.effect == pytest.approx(0.4 - 0.055) and v.verdict == "holds"


def test_nngp_rows_never_reach_the_ntk_claims() -> None:
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1):
        kernel += ntk("learned", s, "tail_cos_mean", {4 * L: 0.9}, step=0)
        kernel += ntk("learned", s, "tail_cos_mean", {4 * L: 0.5}, step=100)
        kernel += ntk("rope", s, "tail_cos_mean", {4 * L: 0.9}, step=0)
        kernel += ntk("rope", s, "tail_cos_mean", {4 * L: 0.95}, step=100)
        kernel += ntk("learned", s, "tail_cos_mean", {4 * L: 9.0}, step=100, kernel="nngp")
    (v,) = judge(evidence(rows, kernel), ["tail_kernel_collapse"])
    assert v.numbers == {"absolute": pytest.approx(-0.4), "relative": pytest.approx(0.05)}


def test_cnn_shift_invariance_within_the_relative_tolerance() -> None:
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1):
        kernel += ntk("none", s, "shift_invariance_error", {4 * L: 0.002 + 0.001 * s},
                      config={"model.family": "cnn"})  # fmt: skip
        kernel += ntk("rope", s, "shift_invariance_error", {4 * L: 0.001},
                      config={"model.family": "transformer"})  # fmt: skip
    (v,) = judge(evidence(rows, kernel), ["cnn_kernel_shift_invariant"])
    assert v.effect == pytest.approx(0.01 - 0.0025) and v.verdict == "holds"
    assert v.numbers["rope"] == pytest.approx(0.001)


def test_drift_claim_leaves_lazy_twins_out_and_calls_a_zero_drift_inconclusive() -> None:
    """A linearised twin's kernel never moves (relative_change 0): the drift claim reads only
    networks, and a network whose drift is 0 gets a reason, not a failed log-log fit."""
    rows = trial_rows("rope", 0, {1: 1.0})
    kernel = []
    for s in (0, 1, 2):
        for w in (32, 64, 128):
            ntk_cfg = {"model.parametrization": "ntk"}
            drift = 0.5 * (w / 32) ** -0.5 * (1 + 0.01 * s)
            kernel += ntk("rope", s, "relative_change", {L: 0.0}, step=0, width=w, config=ntk_cfg)
            kernel += ntk("rope", s, "relative_change", {L: drift}, width=w, config=ntk_cfg)
            lazy = {**ntk_cfg, **LAZY}
            kernel += ntk("rope", s, "relative_change", {L: 0.0}, width=w, config=lazy)
            kernel += ntk("alibi", s, "relative_change", {L: 0.0}, width=w, config=ntk_cfg)
    verdicts = by_scope(judge(evidence(rows, kernel), ["drift_falls_with_width"]))
    assert sorted(verdicts) == ["copy: alibi", "copy: rope"]
    assert verdicts["copy: rope"].effect == pytest.approx(-0.5, abs=1e-6)
    assert verdicts["copy: alibi"].verdict == "inconclusive"
    assert "not positive" in verdicts["copy: alibi"].reason


def test_matched_claim_judges_only_pairs_equal_at_train_length() -> None:
    """Seeds 0 and 1: the twin's loss at L_train is within 0.02 of its network's (1.01 vs
    1.00), its rise 0.5; seed 2: 1.5 vs 1.0, unmatched, rise 5.0. The matched claim's effect is
    0.5 - 0.1 over seeds 0, 1 alone, and says 1 pair was left out; the plain claim pools all 3."""
    rows = []
    matched = {"train.regime": "lazy", "train.match.target": "network",
               "train.match.tolerance": 0.02}  # fmt: skip
    for s, (at_train, rise) in enumerate([(1.01, 0.5), (1.01, 0.5), (1.5, 5.0)]):
        rows += trial_rows("rope", s, {1: at_train, 4: at_train + rise}, config=matched)
        rows += trial_rows("rope", s, {1: 1.0, 4: 1.1}, config={"train.regime": "rich"})
    ev = evidence(rows, [])
    (v,) = judge(ev, ["features_rescue_extrapolation_matched"])
    assert v.scope == "copy @ 4x: rope (2 matched, 1 unmatched)"
    assert v.effect == pytest.approx(0.5 - 0.1) and v.seeds == 2
    (plain,) = judge(ev, ["features_rescue_extrapolation"])
    assert plain.effect == pytest.approx((0.5 + 0.5 + 5.0) / 3 - 0.1)
    loose = [r if r["train.regime"] == "rich" else {**r, "train.match.tolerance": 0.001}
             for r in rows]  # fmt: skip
    (none,) = judge(evidence(loose, []), ["features_rescue_extrapolation_matched"])
    assert none.scope == "copy @ 4x: rope (0 matched, 3 unmatched)"
    assert none.verdict == "inconclusive" and "no pair matched" in none.reason

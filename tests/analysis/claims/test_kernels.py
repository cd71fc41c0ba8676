"""NTK claims on hand-made kernel rows with known effects."""

from __future__ import annotations

import pytest

from rope_lab.analysis.claims import judge
from tests.analysis.claims.common import L, evidence, trial_rows


def ntk_rows(kind, seed, metric, values_by_step, *, probe=4 * L, width=64, param="sp"):
    trial = trial_rows(kind, seed, {1: 1.0}, config={"model.width": width})[0]
    return [
        {**{k: trial[k] for k in trial if k.startswith(("model.", "train.", "task."))},
         "model.parametrization": param, "trial_id": f"{trial['trial_id']}-w{width}",
         "status": "done", "step": step, "probe_length": probe, "group": "total",
         "metric": metric, "value": value, "method": "none", "factor": 1.0}
        for step, value in values_by_step.items()
    ]  # fmt: skip


def test_tail_kernel_collapse() -> None:
    eval_rows = trial_rows("rope", 0, {1: 1.0})
    ntk = []
    for s in (0, 1):
        ntk += ntk_rows("learned", s, "tail_cos_mean", {0: 0.9, 50: 0.6, 100: 0.5 - 0.1 * s})
        ntk += ntk_rows("rope", s, "tail_cos_mean", {0: 0.9, 100: 0.95})
        ntk += ntk_rows("rope", s, "tail_cos_mean", {0: 0.1, 100: 0.0}, probe=2 * L)  # ignored
    v = judge(evidence(eval_rows, ntk), ["tail_kernel_collapse"])[0]
    # absolute change -0.45 (mean), relative +0.05: min(0.45, 0.5)
    assert v.effect == pytest.approx(0.45) and v.verdict == "holds"
    assert v.numbers == {"absolute": pytest.approx(-0.45), "relative": pytest.approx(0.05)}


def test_shift_invariance_margin() -> None:
    eval_rows = trial_rows("rope", 0, {1: 1.0})
    ntk = []
    for s in (0, 1):
        ntk += ntk_rows("sinusoidal", s, "shift_invariance_error", {0: 0.3, 100: 0.2})
        ntk += ntk_rows("rope", s, "shift_invariance_error", {0: 0.0, 100: 0.001})
        ntk += ntk_rows("none", s, "shift_invariance_error", {100: 0.002})
    v = judge(evidence(eval_rows, ntk), ["shift_invariance"])[0]
    assert v.effect == pytest.approx(min(0.2 - 0.002, 0.01 - 0.002)) and v.verdict == "holds"


def test_drift_slope_under_ntk_parametrisation() -> None:
    eval_rows = trial_rows("rope", 0, {1: 1.0})
    ntk = []
    for s in (0, 1, 2):
        for w in (32, 64, 128):
            drift = 0.5 * (w / 32) ** -0.5 * (1 + 0.01 * s)
            ntk += ntk_rows("rope", s, "relative_change", {0: 0.0, 100: drift}, width=w,
                            probe=L, param="ntk")  # fmt: skip
        ntk += ntk_rows("rope", s, "relative_change", {100: 9.0}, width=256, probe=L)  # sp: out
    v = judge(evidence(eval_rows, ntk), ["drift_falls_with_width"])[0]
    assert v.scope == "copy: rope" and v.effect == pytest.approx(-0.5, abs=1e-6)
    assert v.verdict == "holds" and v.ci_high < 0
    two_seeds = [r for r in ntk if not r["trial_id"].startswith("copy-rope-2")]
    v = judge(evidence(eval_rows, two_seeds), ["drift_falls_with_width"])[0]
    assert v.verdict == "inconclusive" and "3 seeds" in v.reason


def test_shift_invariance_compares_every_encoding_declared_shift_invariant() -> None:
    """T5 bias and xPos (logits a function of i - j) join the invariant arm; FIRE (distances
    normalised by the query position) is neither invariant nor absolute, so it sits out."""
    eval_rows = trial_rows("rope", 0, {1: 1.0})
    ntk = []
    for s in (0, 1):
        ntk += ntk_rows("learned", s, "shift_invariance_error", {100: 0.2})
        ntk += ntk_rows("t5_bias", s, "shift_invariance_error", {100: 0.001})
        ntk += ntk_rows("xpos", s, "shift_invariance_error", {100: 0.004})
        ntk += ntk_rows("fire", s, "shift_invariance_error", {100: 0.5})
    v = judge(evidence(eval_rows, ntk), ["shift_invariance"])[0]
    assert set(v.numbers) == {"learned", "t5_bias", "xpos"}
    assert v.effect == pytest.approx(0.01 - 0.004) and v.verdict == "holds"

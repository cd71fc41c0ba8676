"""The loss-law claims on a store whose gaps follow known power laws in N."""

from __future__ import annotations

import pytest

from rope_lab.analysis import claims
from rope_lab.analysis.claims.laws import FLAT, HELD_OUT_TOLERANCE
from rope_lab.analysis.plots import scaling_data
from rope_lab.analysis.ratio_laws import ratio_law_table
from tests.analysis.claims.common import by_scope, evidence, trial_rows
from tests.analysis.plots.synthetic import make_gap_store

GAMMAS = {"alibi": -0.3, "none": 0.1}  # none: its largest model 30% off the law too


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, dict]:
    run = make_gap_store(tmp_path_factory.mktemp("gaps"), GAMMAS, bump="none", ratios=(1, 2))
    names = ["extrapolation_gap_shrinks_with_scale", "loss_law_predicts_held_out_scale"]
    found = claims.judge(run, names, n_boot=400)
    out: dict[str, dict] = {name: {} for name in names}
    for v in found:
        out[v.claim][v.scope] = v
    out["run"] = {"path": run}
    return out


def test_a_shrinking_gap_holds_and_a_growing_one_fails(verdicts) -> None:
    gap = verdicts["extrapolation_gap_shrinks_with_scale"]
    assert sorted(gap) == [f"lm_text: {k} @ {r}x" for k in sorted(GAMMAS) for r in (2,)]
    for scope, v in gap.items():
        gamma = GAMMAS[scope.split(": ")[1].split(" @")[0]]
        assert v.verdict == ("holds" if gamma < 0 else "fails"), v
        if gamma < 0:  # (the kind with a bump at the largest N fits a steeper gamma)
            assert v.ci_low <= gamma + 0.005 and gamma - 0.005 <= v.ci_high, v
            assert v.effect == pytest.approx(gamma, abs=0.005)
        assert (v.threshold, v.direction, v.seeds) == (-FLAT, "<", 3)
        assert v.numbers["gaps"] == 15


def test_the_held_out_claim_fails_where_the_largest_model_is_off_the_law(verdicts) -> None:
    held = verdicts["loss_law_predicts_held_out_scale"]
    run = verdicts["run"]["path"]
    assert sorted(held) == [f"lm_text: {k} @ {r}x" for k in sorted(GAMMAS) for r in (1, 2)]
    for scope, v in held.items():
        kind = scope.split(": ")[1].split(" @ ")[0]
        assert v.verdict == ("fails" if kind == "none" else "holds"), v
        assert (v.effect > HELD_OUT_TOLERANCE) == (kind == "none")
        assert v.ci_low is None and v.threshold == HELD_OUT_TOLERANCE
    # the effect is the held-out error of that ratio's law, as the per-ratio table has it
    rows = scaling_data(run, "loss", length_ratio=1.0)[0]
    table = ratio_law_table(rows.filter(rows["label"] == "none"), n_boot=0)
    effect = held["lm_text: none @ 1x"].effect
    assert effect == pytest.approx(table["heldout_max_rel_error"][0], rel=1e-9)


def test_a_flat_gap_fails_and_missing_columns_say_so() -> None:
    """A gap equal at every N fits gamma ~ 1e-17, which must not count as below 0; runs
    without N or labels are inconclusive with the reason."""
    rows = [r for s in (0, 1, 2) for r in trial_rows("alibi", s, {1: 2.0, 2: 2.1})]
    ev = evidence(rows)
    (v,) = claims.judge(ev, ["extrapolation_gap_shrinks_with_scale"])
    assert v.verdict == "inconclusive"
    assert v.reason == "needs eval rows with n_params_non_embedding, label, length_ratio and a loss"
    flat = []
    for n in (1e4, 1e5, 1e6):
        extra = {"n_params_non_embedding": n, "tokens_seen": 1e6, "label": "alibi"}
        for s in (0, 1, 2):
            loss = {1: 1.5 + n**-0.3, 2: 1.6 + n**-0.3}
            flat += [r | extra | {"trial_id": f"{n}-{s}", "length_ratio": r["length"] / 16}
                     for r in trial_rows("alibi", s, loss)]  # fmt: skip
    (v,) = by_scope(claims.judge(evidence(flat), ["extrapolation_gap_shrinks_with_scale"])).values()
    assert abs(v.effect) < 1e-12 and v.verdict == "fails"


def test_the_claims_name_their_sources() -> None:
    from rope_lab.registry import CLAIMS

    assert "Anil et al. 2022" in CLAIMS["extrapolation_gap_shrinks_with_scale"].source
    assert "Hoffmann et al. 2022" in CLAIMS["loss_law_predicts_held_out_scale"].source
    assert f"{HELD_OUT_TOLERANCE:.0%}" in CLAIMS["loss_law_predicts_held_out_scale"].statement

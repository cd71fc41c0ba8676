"""The optimum claims on hand-made rows: lr transfer with known slopes per parametrisation, and
the compute-optimal frontier with a known exponent at 1x and 4x L_train."""

from __future__ import annotations

import polars as pl
import pytest

from rope_lab.analysis import claims
from rope_lab.analysis.claims.optima import TRANSFER_TOLERANCE
from tests.analysis.claims.common import by_scope, evidence
from tests.analysis.test_isoflop import law_rows
from tests.analysis.test_lr_transfer import sweep_rows

LR_CLAIM = "mup_transfers_learning_rate"
SIZE_CLAIM = "compute_optimal_size_depends_on_length"
AS_TRAINED = {"method": "none", "status": "done", "model.position.kind": "alibi",
              "train.length": 16, "position_bucket": None}  # fmt: skip


def lr_evidence(slopes: dict[str, float], seeds: int = 3):
    rows = sweep_rows(slopes, seeds=seeds, noise=0.002)
    rows = rows.with_columns(length=(pl.col("length_ratio") * 16).cast(pl.Int64))
    return evidence([r | AS_TRAINED for r in rows.to_dicts()], n_boot=200)


@pytest.mark.parametrize(
    ("slopes", "verdict", "reason"),
    [
        ({"mup": 0.0, "sp": -1.0}, "holds", ""),
        ({"mup": -1.0, "sp": -1.0}, "fails", "muP's slope interval"),
        ({"mup": 0.0, "sp": 0.5}, "fails", "SP's slope interval"),
    ],
)
def test_lr_transfer_holds_or_fails_on_known_slopes(slopes, verdict, reason) -> None:
    found = by_scope(claims.judge(lr_evidence(slopes), [LR_CLAIM]))
    assert sorted(found) == ["lm_text @ 1x", "lm_text @ 4x"]
    for v in found.values():
        assert v.verdict == verdict, v
        assert v.reason.startswith(reason)
        assert v.effect == pytest.approx(slopes["mup"], abs=0.1)
        assert v.numbers["sp_slope"] == pytest.approx(slopes["sp"], abs=0.1)
        assert (v.threshold, v.seeds) == (TRANSFER_TOLERANCE, 3)


def test_lr_transfer_without_an_sp_arm_is_inconclusive() -> None:
    (v, _) = claims.judge(lr_evidence({"mup": 0.0}), [LR_CLAIM])
    assert (v.verdict, v.reason) == ("inconclusive", "needs mup and sp trials; no sp")


def test_lr_transfer_without_widths_says_what_it_needs() -> None:
    rows = [r | AS_TRAINED | {"length": 16} for r in sweep_rows({"sp": 0.0}).drop(
        "model.width").to_dicts()]  # fmt: skip
    (v,) = claims.judge(evidence(rows), [LR_CLAIM])
    assert v.reason == ("needs eval rows with train.lr, model.width, model.parametrization, "
                        "length_ratio and a loss")  # fmt: skip


def size_evidence(exponents: dict[float, tuple[float, float]]):
    """Rows at each ratio whose loss law has (alpha, beta): frontier exponent beta/(a+b)."""
    rows = []
    for ratio, (alpha, beta) in exponents.items():
        part = law_rows(alpha, beta, noise=0.002, seeds=3)
        part = part.with_columns(length_ratio=pl.lit(ratio), length=pl.lit(int(16 * ratio)))
        rows += [r | AS_TRAINED for r in part.to_dicts()]
    return evidence(rows, n_boot=200)


@pytest.mark.parametrize(
    ("far", "verdict"),
    [((0.2, 0.4), "holds"), ((0.4, 0.2), "fails"), ((0.34, 0.28), "inconclusive")],
)
def test_the_optimal_size_claim_compares_the_frontier_exponents(far, verdict) -> None:
    near = (0.34, 0.28)  # a = 0.28 / 0.62 = 0.452
    (v,) = claims.judge(size_evidence({1.0: near, 4.0: far}), [SIZE_CLAIM])
    a_near, a_far = near[1] / sum(near), far[1] / sum(far)
    assert v.verdict == verdict, v
    assert v.numbers["a_1x"] == pytest.approx(a_near, abs=0.02)
    assert v.effect == pytest.approx(a_far - a_near, abs=0.03)
    if verdict == "inconclusive":
        assert v.reason.startswith("the intervals of a overlap: 1x [")


def test_the_optimal_size_claim_without_the_far_ratio_is_inconclusive() -> None:
    (v,) = claims.judge(size_evidence({1.0: (0.34, 0.28)}), [SIZE_CLAIM])
    assert (v.scope, v.verdict, v.reason) == (
        "lm: rope",
        "inconclusive",
        "needs eval rows at 1x and 4x; none at 4x",
    )


def test_the_claims_name_their_sources() -> None:
    from rope_lab.registry import CLAIMS

    assert "Everett et al. 2024" in CLAIMS[LR_CLAIM].source
    assert "Tensor Programs V" in CLAIMS[LR_CLAIM].source
    assert "Hoffmann et al. 2022" in CLAIMS[SIZE_CLAIM].source

"""The sliding-window scaling claim on hand-made rows with known answers."""

from __future__ import annotations

import pytest

from rope_lab.analysis.claims import judge
from rope_lab.analysis.claims.windows import fixed_pairs
from tests.analysis.claims.common import by_scope, evidence, trial_rows

SCALED = {"model.layers": '[{"window": 8}, {}]'}
FIXED = {"model.layers": '[{"window": 8, "eval_scaling": false}, {}]'}
CLAIM = ["scaled_window_layers_extrapolate_better"]


def test_fixed_pairs_match_a_layout_with_its_fixed_twin() -> None:
    variants = {"rope [rope.w8 | rope]", "rope [rope.w8.fixed | rope]", "rope [rope.w4.fixed]"}
    assert fixed_pairs(variants) == [("rope [rope.w8 | rope]", "rope [rope.w8.fixed | rope]")]


def test_per_method_and_fine_tuning_on_loss() -> None:
    """A language model is read by its loss. Loss at 4x (the longest ratio), fixed minus
    scaled: yarn x4 zero-shot 3.0 - 2.0 = 1 on both seeds (holds: scaling the window layers
    is better); rerope x4 zero-shot 2.0 - 2.5 = -0.5 (fails: leaving them is better); yarn x4
    fine-tuned 1.5 - 1.4 and 1.5 - 1.6: 0.0 on average, its interval [-0.1, 0.1] straddles 0.
    The rows as trained are not judged."""
    rows = []
    for seed, tuned_scaled in ((0, 1.4), (1, 1.6)):
        for config, yarn, rerope, tuned in (
            (SCALED, 2.0, 2.5, tuned_scaled),
            (FIXED, 3.0, 2.0, 1.5),
        ):
            lm = {"task": "lm_text", "config": config}
            rows += trial_rows("rope", seed, {1: 1.0, 4: 9.0}, **lm)
            rows += trial_rows("rope", seed, {1: 1.0, 4: yarn}, method="yarn", factor=4.0, **lm)
            rows += trial_rows("rope", seed, {1: 1.0, 4: rerope}, method="rerope", factor=4.0, **lm)
            rows += trial_rows(
                "rope", seed, {1: 1.0, 4: tuned}, method="yarn", factor=4.0, finetune=50, **lm
            )
    verdicts = by_scope(judge(evidence(rows, min_seeds=2), CLAIM))
    head = "lm_text: rope [rope.w8 | rope] vs .fixed"
    yarn = verdicts[f"{head}, yarn x4 zero-shot, 4x"]
    assert yarn.effect == pytest.approx(1.0) and yarn.verdict == "holds"
    assert yarn.numbers == {"window layers scaled": 2.0, "window layers as trained": 3.0}
    rerope = verdicts[f"{head}, rerope x4 zero-shot, 4x"]
    assert rerope.effect == pytest.approx(-0.5) and rerope.verdict == "fails"
    tuned = verdicts[f"{head}, yarn x4 fine-tuned, 4x"]
    assert tuned.effect == pytest.approx(0.0, abs=1e-12) and tuned.verdict == "inconclusive"
    assert len(verdicts) == 3


def test_on_accuracy_the_scaled_arm_must_score_higher() -> None:
    """A needle task is read by accuracy: scaled 0.9 against fixed 0.5 is +0.4, holds."""
    rows = []
    for seed in (0, 1):
        for config, acc in ((SCALED, 0.9), (FIXED, 0.5)):
            rows += trial_rows(
                "rope", seed, {1: 1.0, 4: 3.0}, task="passkey", method="yarn", factor=4.0,
                accuracy={1: 1.0, 4: acc}, config=config,
            )  # fmt: skip
    (verdict,) = judge(evidence(rows), CLAIM)
    assert verdict.effect == pytest.approx(0.4) and verdict.verdict == "holds"


def test_without_both_arms_inconclusive() -> None:
    rows = trial_rows("rope", 0, {1: 1.0, 4: 2.0}, method="yarn", factor=4.0, config=SCALED)
    (verdict,) = judge(evidence(rows), CLAIM)
    assert verdict.verdict == "inconclusive" and "eval_scaling: false" in verdict.reason


def test_equal_arms_are_a_tie_not_a_verdict() -> None:
    """A remap wider than the sliding window leaves the window kinds as they are: equal arms,
    reported inconclusive with the reason, not 'fails'."""
    rows = []
    for seed in (0, 1):
        for config in (SCALED, FIXED):
            rows += trial_rows(
                "rope", seed, {1: 1.0, 4: 2.0}, task="lm_text", method="rerope", factor=4.0,
                config=config,
            )  # fmt: skip
    (verdict,) = judge(evidence(rows), CLAIM)
    assert verdict.verdict == "inconclusive" and "the arms are equal" in verdict.reason

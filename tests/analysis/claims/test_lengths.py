"""The effective-length claim on hand-made rows with known answers."""

from __future__ import annotations

import pytest

from rope_lab.analysis.claims import judge
from tests.analysis.claims.common import by_scope, evidence, trial_rows

CLAIM = ["method_extends_effective_length"]
LOSS = {0.5: 1.0, 1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}


def test_effective_length_gain_per_method() -> None:
    """Accuracy >= 0.9 from the shortest length: as trained to 2x (0.95, 0.95, 0.92, then
    0.5); yarn x4 to 8x (+6 L_train, holds); linear x4 misses at 0.5x (0.8): counts 0, -2
    (fails); a fine-tuned row is not judged."""
    rows = []
    for seed in (0, 1):
        acc = {0.5: 0.95, 1: 0.95, 2: 0.92, 4: 0.5, 8: 0.1}
        rows += trial_rows("rope", seed, LOSS, task="passkey", accuracy=acc)
        yarn = {0.5: 0.95, 1: 0.95, 2: 0.95, 4: 0.93, 8: 0.91}
        rows += trial_rows(
            "rope", seed, LOSS, task="passkey", method="yarn", factor=4.0, accuracy=yarn
        )
        lin = {0.5: 0.8, 1: 0.95, 2: 0.95, 4: 0.95, 8: 0.95}
        rows += trial_rows(
            "rope", seed, LOSS, task="passkey", method="linear", factor=4.0, accuracy=lin
        )
        rows += trial_rows(
            "rope", seed, LOSS, task="passkey", method="yarn", factor=4.0, finetune=50, accuracy=lin
        )
    verdicts = by_scope(judge(evidence(rows), CLAIM))
    assert set(verdicts) == {"passkey: yarn x4", "passkey: linear x4"}
    yarn, linear = verdicts["passkey: yarn x4"], verdicts["passkey: linear x4"]
    assert yarn.effect == pytest.approx(6.0) and yarn.verdict == "holds"
    assert yarn.numbers == {"yarn": 8.0, "as trained": 2.0}
    assert linear.effect == pytest.approx(-2.0) and linear.verdict == "fails"


def test_text_tasks_are_not_judged() -> None:
    rows = trial_rows("rope", 0, LOSS, task="lm_text")
    (verdict,) = judge(evidence(rows), CLAIM)
    assert verdict.verdict == "inconclusive" and "scored tasks" in verdict.reason

"""The per-trial length measures claims can compare: RULER's effective length and the
longest length kept, each against hand-computed values on hand-made rows."""

from __future__ import annotations

import pytest

from rope_lab.analysis.claims import measures
from tests.analysis.claims.common import evidence, trial_rows

LOSS = {0.5: 1.0, 1.0: 1.0, 2.0: 1.05, 4.0: 2.0}


def _rows() -> list[dict]:
    """rope: accuracy 0.85, 0.95, 0.90, 0.87 at 0.5-4 x L_train; alibi: 1.0, 1.0, 0.95, 0.8.
    A row at a set needle depth (accuracy 1 at 4x) must not count."""
    rope = trial_rows("rope", 0, LOSS, accuracy={0.5: 0.85, 1.0: 0.95, 2.0: 0.9, 4.0: 0.87})
    alibi = trial_rows("alibi", 0, LOSS, accuracy={0.5: 1.0, 1.0: 1.0, 2.0: 0.95, 4.0: 0.8})
    depth_row = {**alibi[-1], "accuracy": 1.0, "depth": 0.5}
    return rope + alibi + [depth_row]


def _values(frame) -> dict[str, float | None]:
    return {t.split("-")[1]: v for t, v in frame.select("trial_id", "value").iter_rows()}


def test_effective_length_is_rulers_absolute_bar_from_the_shortest_length() -> None:
    """Bar 0.9 from 0.5x: rope misses it at 0.5x (0.85), so none; alibi keeps it up to 2x
    (0.95) and misses at 4x (0.8): 2.0. Loss: from L_train, <= 1.0 / 0.9 = 1.11 up to 2x."""
    ev = evidence(_rows())
    assert _values(measures.effective_length(ev, "copy")) == {"rope": None, "alibi": 2.0}
    by_loss = measures.effective_length(ev, "copy", metric="loss")
    assert _values(by_loss) == {"rope": 2.0, "alibi": 2.0}


def test_longest_kept_is_relative_to_the_value_at_l_train() -> None:
    """Bar 0.9 x the L_train value from L_train: rope 0.855 (kept to 4x: 0.90, 0.87), alibi
    0.9 (kept to 2x); a threshold of 0.95 keeps rope only to L_train (0.9025 > 0.90)."""
    ev = evidence(_rows())
    assert _values(measures.longest_kept(ev, "copy")) == {"rope": 4.0, "alibi": 2.0}
    assert _values(measures.longest_kept(ev, "copy", threshold=0.95))["rope"] == pytest.approx(1.0)


def test_scaling_factors_and_the_factor_read_at_a_ratio() -> None:
    """Factors are the plain RoPE model's under the method, zero-shot or fine-tuned apart (an
    alibi row at factor 8 and a fine-tuned factor 3 do not count zero-shot); at a ratio the
    largest factor <= it is read, the smallest when all are larger, None without any."""
    rows = trial_rows("rope", 0, LOSS)
    for factor in (4.0, 2.0):
        rows += trial_rows("rope", 0, LOSS, method="yarn", factor=factor)
    rows += trial_rows("rope", 0, LOSS, method="yarn", factor=3.0, finetune=10)
    rows += trial_rows("alibi", 0, LOSS, method="yarn", factor=8.0)
    ev = evidence(rows)
    assert measures.scaling_factors(ev, "copy", "yarn") == [2.0, 4.0]
    assert measures.scaling_factors(ev, "copy", "yarn", finetuned=True) == [3.0]
    assert measures.scaling_factors(ev, "copy", "ntk") == []
    assert [measures.factor_for_ratio([2.0, 4.0], r) for r in (1.5, 2.0, 3.9, 8.0)] == [
        2.0,
        2.0,
        2.0,
        4.0,
    ]
    assert measures.factor_for_ratio([], 2.0) is None
    assert measures.arm_mean("yarn")({"yarn": 1.25, "direct": 3.0}) == 1.25

"""The source notes' report per curve (`rope_lab.analysis.length_report`, and its columns in
`extrapolation_summary`): hand-computed numbers on small hand-built tables."""

from __future__ import annotations

import math

import polars as pl
import pytest

from rope_lab.analysis import length_report as lr
from rope_lab.analysis import query as q

NAN = math.nan


def test_effective_length_is_the_longest_length_with_every_shorter_one_meeting_the_bar() -> None:
    """RULER's convention: 256 scores 0.97 but 128 (0.85) breaks the run, so 64; a value
    equal to the bar meets it; a NaN ends the run; a loss is checked from ``start`` only."""
    lengths, acc = [64, 16, 32, 128, 256], [0.92, 1.0, 0.95, 0.85, 0.97]
    assert lr.effective_length(lengths, acc, bar=0.9, lower=False) == 64
    assert lr.effective_length([16, 32], [0.9, 0.89], bar=0.9, lower=False) == 16
    assert lr.effective_length([16, 32], [0.89, 1.0], bar=0.9, lower=False) is None
    assert lr.effective_length([16, 32, 64], [1.0, NAN, 1.0], bar=0.9, lower=False) == 16
    losses = [3.0, 2.0, 2.1, 2.5]  # at 8, 16, 32, 64; bar 2.0 / 0.9 = 2.22
    assert lr.effective_length([8, 16, 32, 64], losses, bar=2 / 0.9, lower=True, start=16) == 32
    assert lr.effective_length([8, 16, 32, 64], losses, bar=2 / 0.9, lower=True) is None
    assert lr.effective_length([16], [1.0], bar=None, lower=False) is None


def test_effective_bar_is_absolute_for_a_score_and_the_unscaled_loss_over_threshold() -> None:
    assert lr.effective_bar(False, 0.5, 0.9) == 0.9  # accuracy: the threshold itself
    assert lr.effective_bar(True, 2.0, 0.9) == pytest.approx(2.2222222222)
    assert lr.effective_bar(True, 2.0, 0.8) == pytest.approx(2.5)
    assert lr.effective_bar(True, None) is None and lr.effective_bar(True, NAN) is None


def test_bucket_means_over_ratios_with_inclusive_upper_edges() -> None:
    """L_train 16: ratios 0.25, 0.5, 1 | 1.5, 2 | 4, 8 | 16 (1x, 2x and 8x close their
    buckets)."""
    lengths = [4, 8, 16, 24, 32, 64, 128, 256]
    loss = [3.0, 2.5, 2.0, 2.2, 2.4, 3.0, 4.0, 6.0]
    got = lr.bucket_means(lengths, loss, 16)
    assert got == pytest.approx({"0_1x": 2.5, "1_2x": 2.3, "2_8x": 3.5, "8x_up": 6.0})
    assert lr.bucket_means([16], [1.0], 16) == {
        "0_1x": 1.0,
        "1_2x": None,
        "2_8x": None,
        "8x_up": None,
    }
    assert lr.bucket_means([16, 32], [NAN, 1.0], 16)["0_1x"] is None


def test_short_context_delta_pairs_lengths_in_a_quarter_to_one_l_train() -> None:
    """L_train 16: lengths 4, 8, 16 count (2 is 0.125x, 32 is 2x): +0.3, +0.1, 0.0 -> 0.4 / 3;
    a length the unscaled model lacks, or a NaN on either side, is left out."""
    lengths, values = [2, 4, 8, 16, 32], [9.0, 2.8, 2.3, 2.0, 5.0]
    unscaled = {2: 1.0, 4: 2.5, 8: 2.2, 16: 2.0, 32: 3.0}
    assert lr.short_context_delta(lengths, values, unscaled, 16) == pytest.approx(0.4 / 3)
    without_8 = {k: v for k, v in unscaled.items() if k != 8}
    assert lr.short_context_delta(lengths, values, without_8, 16) == pytest.approx(0.15)
    assert lr.short_context_delta(lengths, values, {**unscaled, 4: NAN}, 16) == pytest.approx(0.05)
    assert lr.short_context_delta([2, 32], [1.0, 1.0], unscaled, 16) is None


def test_largest_jump_is_the_largest_change_either_way_between_neighbours() -> None:
    """Sorted: 16 1.0, 32 0.9, 64 0.5, 128 0.6: changes -0.1, -0.4, +0.1, so 0.4 at 64; a NaN
    leaves both of its pairs out."""
    assert lr.largest_jump([64, 16, 32, 128], [0.5, 1.0, 0.9, 0.6]) == (pytest.approx(0.4), 64)
    assert lr.largest_jump([16, 32, 64], [0.2, 0.9, 0.7]) == (pytest.approx(0.7), 32)
    assert lr.largest_jump([16, 32, 64], [1.0, NAN, 0.0]) == (None, None)
    assert lr.largest_jump([16], [1.0]) == (None, None)


L = 16
LENGTHS = (4, 8, 16, 32, 64, 256)
# trial, method, factor, fine-tuning steps -> (loss, accuracy) at LENGTHS
CURVES = {
    ("rope", "default", 1.0, 0): (
        [3.0, 2.4, 2.0, 2.6, 4.0, 6.0],
        [1.0, 0.95, 0.9, 0.5, 0.2, 0.0],
    ),
    ("rope", "linear", 4.0, 0): (
        [3.4, 2.6, 2.1, 2.15, 2.3, 5.0],
        [0.9, 0.9, 0.92, 0.91, 0.85, 0.1],
    ),
    ("rope", "linear", 4.0, 50): ([3.1, 2.45, 2.02, 2.05, 2.1, 2.4], [0.85] + [0.95] * 5),
    ("alibi", "none", 1.0, 0): ([2.8, 2.3, 2.0, 2.05, 2.1, 2.2], [1.0] * 6),
}


def _frame() -> pl.DataFrame:
    rows = []
    for (trial, method, factor, ft), (loss, acc) in CURVES.items():
        rope = trial == "rope"
        for n, lo, a in zip(LENGTHS, loss, acc, strict=True):
            rows.append(
                {"trial_id": trial, "method": method, "factor": factor, "finetune_steps": ft,
                 "length": n, "loss": lo, "accuracy": a, "bits_per_byte": lo / 2,
                 "train.length": L, "model.position.kind": trial,
                 "model.position.rope.scaling": "default" if rope else None,
                 "model.position.rope.factor": 1.0 if rope else None}
            )  # fmt: skip
    return pl.DataFrame(rows)


def _summary(metric: str) -> dict[tuple, dict]:
    s = q.extrapolation_summary(_frame(), metric=metric)
    return {(r["trial_id"], r["method"], r["finetune_steps"]): r for r in s.iter_rows(named=True)}


def test_summary_columns_sit_beside_longest_length() -> None:
    cols = q.extrapolation_summary(_frame()).columns
    i = cols.index("longest_ratio")
    assert cols[i + 1 : i + 3] == ["effective_length", "effective_ratio"]
    report = [
        "loss_0_1x", "loss_1_2x", "loss_2_8x", "loss_8x_up", "bits_per_byte_0_1x",
        "bits_per_byte_1_2x", "bits_per_byte_2_8x", "bits_per_byte_8x_up",
        "short_context_delta", "largest_jump", "largest_jump_at",
    ]  # fmt: skip
    j = cols.index("loss_ratio_16x")
    assert cols[j + 1 : j + 1 + len(report)] == report
    no_bpb = q.extrapolation_summary(_frame().drop("bits_per_byte")).columns
    assert "loss_0_1x" in no_bpb and not any(c.startswith("bits_per_byte") for c in no_bpb)


def test_summary_by_accuracy_hand_values() -> None:
    """Effective length: accuracy >= 0.9 at every length from 4 (longest_length: >= 0.9 x the
    row's own L_train accuracy from 16 on), so the fine-tune's 0.85 at 4 leaves it none.
    Short-context delta of linear x4: (0.9 - 1.0 + 0.9 - 0.95 + 0.92 - 0.9) / 3; largest
    jumps 0.4 (at 32) and 0.75 (at 256)."""
    s = _summary("accuracy")
    rope, linear = s["rope", "default", 0], s["rope", "linear", 0]
    assert (rope["longest_length"], rope["effective_length"]) == (16, 16)
    assert (linear["longest_length"], linear["effective_length"]) == (64, 32)
    assert linear["effective_ratio"] == 2.0
    tuned = s["rope", "linear", 50]  # 0.85 at 4, 0.95 from 8 on: every length counts
    assert (tuned["longest_length"], tuned["effective_length"]) == (256, None)
    assert rope["short_context_delta"] == 0.0
    assert linear["short_context_delta"] == pytest.approx(-0.13 / 3)
    assert tuned["short_context_delta"] == pytest.approx(-0.1 / 3)  # -0.15 + 0.0 + 0.05
    assert (rope["largest_jump"], rope["largest_jump_at"]) == (pytest.approx(0.4), 32)
    assert (linear["largest_jump"], linear["largest_jump_at"]) == (pytest.approx(0.75), 256)
    assert s["alibi", "none", 0]["short_context_delta"] == 0.0


def test_summary_by_loss_hand_values() -> None:
    """A loss's bar is the unscaled model's L_train loss / 0.9 = 2.22, from 16 on: RoPE keeps
    it to 16 (2.6 at 32 misses), linear x4 to 32 (2.3 at 64 misses, though within its own
    2.1 / 0.9 = 2.33: longest_length 64), its fine-tune to 64; ALiBi (its own bar, 2.22) to
    256. Buckets: means of the lengths in (0, 1], (1, 2], (2, 8], (8, inf) x 16."""
    s = _summary("loss")
    rope, linear = s["rope", "default", 0], s["rope", "linear", 0]
    assert (rope["longest_length"], rope["effective_length"]) == (16, 16)
    assert (linear["longest_length"], linear["effective_length"]) == (64, 32)
    assert s["rope", "linear", 50]["effective_length"] == 64
    assert s["alibi", "none", 0]["effective_length"] == 256
    assert [rope[f"loss_{b}"] for b in ("0_1x", "1_2x", "2_8x", "8x_up")] == pytest.approx(
        [7.4 / 3, 2.6, 4.0, 6.0]
    )
    assert [linear[f"loss_{b}"] for b in ("0_1x", "1_2x", "2_8x", "8x_up")] == pytest.approx(
        [2.7, 2.15, 2.3, 5.0]
    )
    assert linear["bits_per_byte_0_1x"] == pytest.approx(1.35)
    assert linear["short_context_delta"] == pytest.approx(0.7 / 3)
    assert s["rope", "linear", 50]["short_context_delta"] == pytest.approx(0.17 / 3)
    assert (linear["largest_jump"], linear["largest_jump_at"]) == (pytest.approx(2.7), 256)


def test_summary_without_the_unscaled_rows() -> None:
    """Without the model as trained, a loss has no bar and no short-context delta."""
    frame = _frame().filter(pl.col("method") != "default")
    s = {
        (r["trial_id"], r["finetune_steps"]): r
        for r in q.extrapolation_summary(frame, metric="loss").iter_rows(named=True)
    }
    assert s["rope", 0]["effective_length"] is None
    assert s["rope", 0]["short_context_delta"] is None
    assert s["rope", 0]["loss_2_8x"] == pytest.approx(2.3)

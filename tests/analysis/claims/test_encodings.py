"""Encoding claims on hand-made rows whose effects are known exactly."""

from __future__ import annotations

import json

import pytest

from rope_lab.analysis.claims import judge
from rope_lab.analysis.claims.encodings import spread_ratio
from tests.analysis.claims.common import by_scope, evidence, trial_rows

# loss at 1x, 2x, 4x, 8x: absolute rise 2.0 / 3.0, RoPE 0.5 / 1.0, ALiBi 0.02 / 0.05
CURVES = {
    "learned": {1: 1.0, 2: 3.0, 4: 4.0, 8: 5.0},
    "sinusoidal": {1: 1.0, 2: 3.0, 4: 4.0, 8: 5.0},
    "rope": {1: 1.0, 2: 1.5, 4: 2.0, 8: 3.0},
    "alibi": {1: 1.0, 2: 1.02, 4: 1.05, 8: 1.06},
}


def zoo(seeds=(0, 1), jitter=0.01, curves=CURVES, **kw):
    rows = []
    for kind, curve in curves.items():
        for s in seeds:
            rows += trial_rows(
                kind, s, {r: v + jitter * s * (r > 1) for r, v in curve.items()}, **kw
            )
    return rows


def test_absolute_degrade_more_effect_is_the_rise_gap() -> None:
    verdicts = by_scope(judge(evidence(zoo()), ["absolute_degrade_more"]))
    at2, at4 = verdicts["copy @ 2x"], verdicts["copy @ 4x"]
    # rise(absolute) at 2x: 2.0 + 0.005 (seed mean); relative: mean of rope 0.5 and alibi 0.02
    assert at2.effect == pytest.approx(2.005 - (0.505 + 0.025) / 2)
    assert at4.effect == pytest.approx(3.005 - (1.005 + 0.055) / 2)
    assert at2.verdict == at4.verdict == "holds"
    assert at2.numbers["absolute"] == pytest.approx(2.005)


def test_absolute_degrade_more_fails_when_the_order_flips() -> None:
    flipped = {"learned": CURVES["alibi"], "rope": CURVES["learned"]}
    v = by_scope(judge(evidence(zoo(curves=flipped)), ["absolute_degrade_more"]))["copy @ 2x"]
    assert v.verdict == "fails" and v.effect == pytest.approx(0.025 - 2.005)


def test_one_seed_is_inconclusive_unless_asked() -> None:
    rows = zoo(seeds=(0,))
    assert {v.verdict for v in judge(evidence(rows), ["absolute_degrade_more"])} == {"inconclusive"}
    judged = judge(evidence(rows, min_seeds=1), ["absolute_degrade_more"])
    assert {v.verdict for v in judged} == {"holds"}


def test_rise_reads_the_buckets_past_l_train() -> None:
    """Whole-sequence loss 2 at 2x, but the buckets past L_train (starts 16, 24) average 3.5:
    the rise is 3.5 - 1 = 2.5, not 1."""
    rows = []
    for s in (0, 1):
        rows += trial_rows("learned", s, {1: 1.0, 2: 2.0}, buckets={2: [0.5, 0.5, 3.0, 4.0]})
        rows += trial_rows("alibi", s, {1: 1.0, 2: 1.0}, buckets={2: [1.0, 1.0, 1.0, 1.0]})
    v = by_scope(judge(evidence(rows), ["absolute_degrade_more"]))["copy @ 2x"]
    assert v.numbers == {"absolute": pytest.approx(2.5), "relative": pytest.approx(0.0)}


def test_alibi_flat_and_rope_between() -> None:
    ev = evidence(zoo())
    flat = judge(ev, ["alibi_flat"])[0]
    assert flat.scope == "copy to 8x" and flat.verdict == "holds"
    assert flat.effect == pytest.approx(0.06 + 0.005)  # the largest rise, seed mean
    between = judge(ev, ["rope_between"])[0]
    # at 4x: rope 1.005 - alibi 0.055 = 0.95; absolute 3.005 - rope 1.005 = 2.0
    assert between.verdict == "holds" and between.effect == pytest.approx(0.95)
    steep = {**CURVES, "alibi": {1: 1.0, 2: 1.3, 4: 1.5, 8: 2.0}}
    assert judge(evidence(zoo(curves=steep)), ["alibi_flat"])[0].verdict == "fails"


def test_nope_competitive_reads_accuracy_past_l_train() -> None:
    rows = []
    for s in (0, 1):
        rows += trial_rows("none", s, {1: 1.0, 2: 1.0}, accuracy={1: 1.0, 2: 0.80 + 0.01 * s})
        rows += trial_rows("alibi", s, {1: 1.0, 2: 1.0}, accuracy={1: 1.0, 2: 0.82})
        rows += trial_rows("learned", s, {1: 1.0, 2: 1.0}, accuracy={1: 1.0, 2: 0.3})
    v = judge(evidence(rows), ["nope_competitive"])[0]
    assert v.effect == pytest.approx(0.805 - 0.82) and v.verdict == "holds"  # within 0.05
    rows = [r for r in rows if r["model.position.kind"] != "none"]
    assert (
        judge(evidence(rows), ["nope_competitive"])[0].reason == "needs NoPE and another encoding"
    )


def test_family_claims_pair_a_variant_with_its_reference() -> None:
    layout = {"model.layers": '[{}, {"position": {"kind": "none"}}]'}
    rows = zoo(curves={"rope": CURVES["rope"]})
    for s in (0, 1):
        rows += trial_rows("rope", s, {1: 1.0, 2: 1.2, 4: 1.4, 8: 2.0}, config=layout)
        rows += trial_rows(
            "rope", s, {1: 1.0, 2: 1.6, 4: 2.5, 8: 3.0}, config={"model.scalable_softmax": True}
        )
    ev = evidence(rows)
    nope = judge(ev, ["nope_layers_beat_rope"])[0]
    assert nope.scope == "copy @ 4x: rope [rope | none] vs rope"
    assert nope.effect == pytest.approx(1.005 - 0.4) and nope.verdict == "holds"
    ssmax = judge(ev, ["ssmax_beats_softmax"])[0]
    assert ssmax.scope == "copy @ 4x: rope +SSMax vs rope"
    assert ssmax.effect == pytest.approx(1.005 - 1.5) and ssmax.verdict == "fails"
    assert judge(ev, ["t5_beats_rope"])[0].verdict == "inconclusive"


def test_temperature_rows_against_the_model_as_trained() -> None:
    rows = zoo(curves={"alibi": CURVES["learned"]})
    for s in (0, 1):
        rows += trial_rows("alibi", s, {1: 1.0, 2: 2.0, 4: 2.5}, method="temperature")
    v = judge(evidence(rows), ["temperature_helps"])[0]
    assert v.scope == "copy @ 4x: alibi"
    assert v.effect == pytest.approx(3.005 - 1.5) and v.verdict == "holds"


def test_spread_ratio_closed_form() -> None:
    import numpy as np

    groups = [np.array([0.0, 2.0]), np.array([1.0, 3.0]), np.array([5.0, 7.0])]
    # within: each std sqrt(2); between: std of (1, 2, 6) = sqrt(7)
    assert spread_ratio(groups) == pytest.approx(np.sqrt(2) / np.sqrt(7))


def test_seed_variance_large_is_the_spread_ratio_of_the_scores() -> None:
    import numpy as np

    acc = {"none": (0.5, 0.9), "alibi": (0.6, 0.8), "learned": (0.1, 0.3)}
    rows = []
    for kind, (a0, a1) in acc.items():
        for s, a in enumerate((a0, a1)):
            rows += trial_rows(kind, s, {1: 1.0, 2: 1.0}, accuracy={1: 1.0, 2: a})
    v = judge(evidence(rows), ["seed_variance_large"])[0]
    expected = spread_ratio([np.array(a) for a in acc.values()])
    assert v.effect == pytest.approx(expected)
    assert v.ci_low <= v.effect <= v.ci_high
    flat = [{**r, "accuracy": 0.5} for r in rows]
    assert "no spread" in judge(evidence(flat), ["seed_variance_large"])[0].reason


def test_a_variant_that_never_learned_is_not_compared() -> None:
    """KERPLE power at chance (accuracy 0.03 at L_train) has a flat, low rise: not a win."""
    rows = zoo(curves={"rope": CURVES["rope"]})
    for s in (0, 1):
        rows += trial_rows("kerple_power", s, {1: 3.0, 2: 3.0, 4: 3.0}, accuracy={1: 0.03})
    v = judge(evidence(rows), ["kerple_power_beats_rope"])[0]
    assert v.verdict == "inconclusive"
    assert v.reason == "kerple_power did not learn the task at L_train (accuracy 0.03 vs 1)"


def test_a_text_protocol_is_part_of_the_scope_not_the_variant() -> None:
    """Encodings read by the same protocol are compared; two protocols are never pooled."""
    rows = []
    for protocol, shift in (("random", 0.0), ("nonoverlapping", 1.0)):
        config = {"eval.text_protocol": protocol}
        for kind in ("learned", "alibi"):
            for s in (0, 1):
                curve = {r: v + shift for r, v in CURVES[kind].items()}
                rows += trial_rows(kind, s, curve, task="lm_text", config=config)
    verdicts = by_scope(judge(evidence(rows), ["absolute_degrade_more"]))
    assert set(verdicts) == {
        "lm_text @ 2x",
        "lm_text @ 4x",
        "lm_text (non-overlapping windows) @ 2x",
        "lm_text (non-overlapping windows) @ 4x",
    }
    assert verdicts["lm_text (non-overlapping windows) @ 2x"].effect == pytest.approx(2.0 - 0.02)


def test_a_task_run_on_two_corpora_is_judged_per_corpus() -> None:
    """A byte-level and a BPE corpus of one task (lm_tokens) are two scopes: their losses, in
    nats per token of different tokenizers, are never pooled. The BPE models' rises are 3x the
    byte models': effects 3 x (2.0 - 0.02) and 2.0 - 0.02, not their mean; one corpus alone
    keeps the scope 'lm_tokens'."""
    rows = []
    for path, scale in (("corpora/bytes", 1.0), ("corpora/bpe", 3.0)):
        for kind in ("learned", "alibi"):
            for s in (0, 1):
                curve = {r: 1.0 + scale * (v - 1.0) for r, v in CURVES[kind].items()}
                config = {"task.params": json.dumps([["path", path]])}  # as trials rows hold it
                rows += trial_rows(kind, s, curve, task="lm_tokens", config=config)
    verdicts = by_scope(judge(evidence(rows), ["absolute_degrade_more"]))
    assert set(verdicts) == {
        f"lm_tokens corpora/{c} @ {k}x" for c in ("bytes", "bpe") for k in (2, 4)
    }
    assert verdicts["lm_tokens corpora/bytes @ 2x"].effect == pytest.approx(2.0 - 0.02)
    assert verdicts["lm_tokens corpora/bpe @ 2x"].effect == pytest.approx(3 * (2.0 - 0.02))
    one = [r for r in rows if "corpora/bpe" in r["task.params"]]
    assert set(by_scope(judge(evidence(one), ["absolute_degrade_more"]))) == {
        "lm_tokens @ 2x",
        "lm_tokens @ 4x",
    }


def test_a_relative_encoding_registered_later_joins_the_relative_arm() -> None:
    """xPos declares family "relative": its plain rows pool with RoPE's; a variant of it with an
    option off its default (which would drag the arm up) stays out."""
    rows = zoo(curves={"learned": CURVES["learned"], "rope": CURVES["rope"]})
    rows += zoo(curves={"xpos": CURVES["alibi"]})
    rows += zoo(curves={"xpos": CURVES["learned"]}, config={"model.position.xpos.gamma": 0.8})
    v = by_scope(judge(evidence(rows), ["absolute_degrade_more"]))["copy @ 2x"]
    assert v.numbers["relative"] == pytest.approx((0.505 + 0.025) / 2)
    assert v.effect == pytest.approx(2.005 - (0.505 + 0.025) / 2) and v.verdict == "holds"


def test_the_encoding_columns_decide_the_family_before_the_registry() -> None:
    """Rows that carry ``encoding.family`` are read from it (a kind unknown to the registry
    joins the relative arm), rows without it from the registered kind (learned); where both
    say something, the column wins."""
    rows = zoo(curves={"learned": CURVES["learned"]})
    rows += zoo(
        curves={"unregistered_bias": CURVES["rope"]}, config={"encoding.family": "relative"}
    )
    v = by_scope(judge(evidence(rows), ["absolute_degrade_more"]))["copy @ 2x"]
    assert v.numbers == {"absolute": pytest.approx(2.005), "relative": pytest.approx(0.505)}
    family = {"learned": "relative", "unregistered_bias": "absolute"}
    swapped = [{**r, "encoding.family": family[r["model.position.kind"]]} for r in rows]
    v = by_scope(judge(evidence(swapped), ["absolute_degrade_more"]))["copy @ 2x"]
    assert v.numbers == {"absolute": pytest.approx(0.505), "relative": pytest.approx(2.005)}

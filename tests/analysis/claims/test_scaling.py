"""RoPE-scaling claims on hand-made rows with known effects."""

from __future__ import annotations

import pytest

from rope_lab.analysis.claims import judge
from rope_lab.analysis.claims.scaling import EXACT_TOLERANCE
from tests.analysis.claims.common import by_scope, evidence, trial_rows

DIRECT = {0.5: 1.2, 1: 1.0, 2: 2.0, 4: 4.0, 8: 6.0}


def rope_with(methods: dict[tuple[str, float, int], dict[float, float]], seeds=(0, 1)):
    rows = []
    for s in seeds:
        rows += trial_rows("rope", s, DIRECT)
        for (method, factor, ft), curve in methods.items():
            rows += trial_rows("rope", s, curve, method=method, factor=factor, finetune=ft)
    return rows


def test_dynamic_equals_direct_is_exact() -> None:
    same = {**DIRECT, 2: 1.5, 4: 1.8}  # equal up to L_train, better past it
    v = judge(evidence(rope_with({("dynamic", 4, 0): same})), ["dynamic_equals_direct"])[0]
    assert v.verdict == "holds" and v.effect == 0.0 and v.seeds == 2
    off = {**same, 0.5: 1.2 + 10 * EXACT_TOLERANCE}
    v = judge(evidence(rope_with({("dynamic", 4, 0): off})), ["dynamic_equals_direct"])[0]
    assert v.verdict == "fails" and v.effect == pytest.approx(10 * EXACT_TOLERANCE)


def test_zero_shot_ordering_effect_is_the_smallest_gap() -> None:
    methods = {
        ("linear", 4, 0): {1: 1.1, 4: 3.0, 8: 5.0},
        ("linear", 8, 0): {1: 1.3, 4: 3.5, 8: 4.5},
        ("dynamic", 4, 0): {1: 1.0, 4: 1.5, 8: 3.0},
        ("yarn", 4, 0): {1: 1.05, 4: 1.7, 8: 2.5},
    }
    verdicts = by_scope(judge(evidence(rope_with(methods)), ["zero_shot_ordering"]))
    at4 = verdicts["copy @ 4x"]
    # at 4x each method at factor 4: worst better = yarn 1.7, best worse = linear 3.0
    assert at4.effect == pytest.approx(3.0 - 1.7) and at4.verdict == "holds"
    assert set(at4.numbers) == {"dynamic", "yarn", "direct", "linear"}
    # at 8x linear uses factor 8 (4.5), dynamic/yarn their largest factor 4: min gap 4.5 - 3.0
    assert verdicts["copy @ 8x"].effect == pytest.approx(4.5 - 3.0)


def test_pi_costs_in_distribution_per_factor() -> None:
    methods = {("linear", 2, 0): {1: 1.01}, ("linear", 4, 0): {1: 0.99}}
    verdicts = by_scope(judge(evidence(rope_with(methods)), ["pi_costs_in_distribution"]))
    assert verdicts["copy: linear x2"].effect == pytest.approx(0.01)
    assert verdicts["copy: linear x2"].verdict == "holds"
    assert verdicts["copy: linear x4"].verdict == "fails"


def test_finetune_recovery_and_the_control() -> None:
    methods = {
        ("linear", 4, 0): {1: 1.1, 4: 3.0},
        ("linear", 4, 50): {1: 1.0, 4: 1.2},
        ("default", 4, 50): {1: 1.0, 4: 1.6},
    }
    ev = evidence(rope_with(methods))
    rec = judge(ev, ["pi_finetune_recovers"])[0]
    assert rec.scope == "copy: linear x4 @ 4x" and rec.effect == pytest.approx(3.0 - 1.2)
    ctl = judge(ev, ["pi_finetune_beats_control"])[0]
    assert ctl.effect == pytest.approx(1.6 - 1.2) and ctl.verdict == "holds"
    without = rope_with({k: v for k, v in methods.items() if k[0] == "linear"})
    missing = judge(evidence(without), ["pi_finetune_beats_control"])[0]
    assert missing.verdict == "inconclusive" and "method default" in missing.reason


def _decode_rows(seed: int, accuracy: dict[str, dict[float, float]]) -> list[dict]:
    """Decode rows of a RoPE trial under dynamic x4: protocol -> ratio -> answer accuracy."""
    rows = []
    for protocol, curve in accuracy.items():
        for r in trial_rows("rope", seed, dict.fromkeys(curve, 1.0), method="dynamic",
                            factor=4.0, accuracy=curve, task="passkey"):  # fmt: skip
            rows.append({**r, "mode": "decode", "protocol": protocol})
    return rows


def test_stale_cache_effect_is_full_minus_stale_past_l_train() -> None:
    """Per seed, accuracy past L_train averaged over lengths; the effect is the mean over
    seeds of per_step_full minus per_step_stale (rows at L_train do not count)."""
    from tests.analysis.claims.common import decode_evidence

    decode = []
    for seed, gap in ((0, 0.2), (1, 0.3), (2, 0.25)):
        decode += _decode_rows(seed, {
            "per_step_full": {1: 0.9, 2: 0.8, 4: 0.6},
            "per_step_stale": {1: 0.1, 2: 0.8 - gap, 4: 0.6 - gap},
            "prefill_fixed": {1: 0.0, 2: 0.0, 4: 0.0},
        })  # fmt: skip
    ev = decode_evidence(trial_rows("rope", 0, DIRECT, task="passkey"), decode)
    (v,) = judge(ev, ["stale_cache_hurts_dynamic"])
    assert v.scope == "passkey" and v.verdict == "holds" and v.seeds == 3
    assert v.effect == pytest.approx(0.25)
    (none,) = judge(evidence(rope_with({})), ["stale_cache_hurts_dynamic"])
    assert none.verdict == "inconclusive" and "eval.decode.protocols" in none.reason


def test_method_keeps_short_context_per_method_and_factor() -> None:
    """Loss minus RoPE as trained at 0.25x, 0.5x and 1x L_train (0.125x and 2x do not count):
    linear x4 +0.5, +0.3, +0.1 -> 0.3 >= 0.05 on both seeds: fails; dynamic x4 equal: 0,
    holds; yarn x4 +0.0 on seed 0 and +0.1 on seed 1: 0.05, its interval [0, 0.1]
    straddles the tolerance. Fine-tuned rows and the temperature stage are not judged."""
    from rope_lab.analysis.claims.scaling import SHORT_CONTEXT_TOLERANCE

    direct = {0.125: 5.0, 0.25: 2.0, 0.5: 1.2, 1: 1.0, 2: 2.0}
    rows = []
    for seed, yarn_gap in ((0, 0.0), (1, 0.1)):
        rows += trial_rows("rope", seed, direct)
        methods = {
            ("linear", 4.0, 0): {0.125: 9.0, 0.25: 2.5, 0.5: 1.5, 1: 1.1, 2: 1.5},
            ("dynamic", 4.0, 0): {**direct, 2: 1.4},
            ("yarn", 4.0, 0): {r: v + yarn_gap for r, v in direct.items() if r <= 1},
            ("linear", 4.0, 50): {0.25: 9.0, 1: 9.0},
            ("temperature", 1.0, 0): {0.25: 9.0, 1: 9.0},
        }
        for (method, factor, ft), curve in methods.items():
            rows += trial_rows("rope", seed, curve, method=method, factor=factor, finetune=ft)
    verdicts = by_scope(judge(evidence(rows), ["method_keeps_short_context"]))
    assert set(verdicts) == {"copy: dynamic x4", "copy: linear x4", "copy: yarn x4"}
    linear, dynamic, yarn = (verdicts[f"copy: {m} x4"] for m in ("linear", "dynamic", "yarn"))
    assert linear.effect == pytest.approx(0.3) and linear.verdict == "fails"
    assert linear.numbers == {"linear": pytest.approx(0.3)} and linear.seeds == 2
    assert dynamic.effect == 0.0 and dynamic.verdict == "holds"
    assert yarn.effect == pytest.approx(0.05) and yarn.verdict == "inconclusive"
    assert (yarn.ci_low, yarn.ci_high) == (pytest.approx(0.0), pytest.approx(0.1))
    assert "straddles 0.05" in yarn.reason
    assert linear.threshold == SHORT_CONTEXT_TOLERANCE == 0.05 and linear.direction == "<"
    (alone,) = judge(evidence(trial_rows("rope", 0, direct)), ["method_keeps_short_context"])
    assert alone.verdict == "inconclusive" and "zero-shot scaling" in alone.reason

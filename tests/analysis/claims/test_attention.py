"""Attention-variant and DroPE claims on hand-made rows with known effects."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from rope_lab.analysis.claims import Evidence, judge
from rope_lab.analysis.claims.attention import RISE_TOLERANCE, SINK_TOLERANCE
from tests.analysis.claims.common import L, by_scope, evidence, trial_rows

SEEDS = (0, 1)
WINDOWS = '[{"window": 8}, {}]'


def fn(name: str, layers: str | None = None) -> dict[str, Any]:
    """The config columns of an attention function (and a layer layout)."""
    return {"model.attention_fn": name, **({"model.layers": layers} if layers else {})}


def trained(kind: str, attention: str, curve: dict[float, float], **kw: Any) -> list:
    """Rows of both seeds as trained, seed s adding 0.01 s to every loss."""
    config = fn(attention, kw.pop("layers", None))
    return [
        row
        for s in SEEDS
        for row in trial_rows(
            kind, s, {r: v + 0.01 * s for r, v in curve.items()}, config=config, **kw
        )
    ]


def verdicts(rows: list, name: str, **kw: Any) -> dict[str, Any]:
    return by_scope(judge(evidence(rows, **kw), [name]))


@pytest.mark.parametrize(("fox_loss", "verdict"), [(2.0, "holds"), (5.0, "fails")])
def test_forgetting_extrapolates_against_rope(fox_loss: float, verdict: str) -> None:
    """Loss at 4x: RoPE 4.0, FoX 2.0 -> effect 2 (holds); FoX 5.0 -> -1 (fails)."""
    rows = trained("rope", "softmax", {1: 1.0, 4: 4.0})
    rows += trained("none", "fox", {1: 1.0, 4: fox_loss})
    (v,) = verdicts(rows, "forgetting_extrapolates").values()
    assert v.scope == "copy @ 4x: none +fox vs rope"
    assert v.effect == pytest.approx(4.0 - fox_loss) and v.verdict == verdict


def test_forgetting_without_rope_or_4x_is_inconclusive() -> None:
    rows = trained("none", "fox", {1: 1.0, 4: 2.0})
    (v,) = verdicts(rows, "forgetting_extrapolates").values()
    assert v.verdict == "inconclusive" and v.reason == "needs FoX (fox or fox_pro) and softmax RoPE"
    rows += trained("rope", "softmax", {1: 1.0, 2: 4.0})
    rows = [r for r in rows if r["length"] != 4 * L]
    (v,) = verdicts(rows, "forgetting_extrapolates").values()
    assert v.verdict == "inconclusive" and v.reason == "not evaluated at 4 x L_train"


def test_stick_breaking_rise_and_against_nope() -> None:
    """Stick-breaking: 1.0 at L_train, 1.05 at 4x (rise 0.05 < tolerance: holds); NoPE 3.0 at
    4x: 3.0 - 1.05 = 1.95 (holds). A rise of 0.5 fails the first scope."""
    assert RISE_TOLERANCE == 0.1
    nope = trained("none", "softmax", {1: 1.0, 4: 3.0})
    good = verdicts(
        nope + trained("none", "stick_breaking", {1: 1.0, 4: 1.05}),
        "stick_breaking_extrapolates_without_pe",
    )
    rise = good["copy @ 4x: rise"]
    assert rise.effect == pytest.approx(0.05) and rise.verdict == "holds"
    assert rise.direction == "<" and rise.threshold == RISE_TOLERANCE
    versus = good["copy @ 4x: vs none"]
    assert versus.effect == pytest.approx(1.95) and versus.verdict == "holds"
    bad = verdicts(
        nope + trained("none", "stick_breaking", {1: 1.0, 4: 3.5}),
        "stick_breaking_extrapolates_without_pe",
    )
    assert bad["copy @ 4x: rise"].verdict == "fails"
    assert bad["copy @ 4x: vs none"].effect == pytest.approx(-0.5)
    assert bad["copy @ 4x: vs none"].verdict == "fails"


def test_stick_breaking_needs_its_arms() -> None:
    name = "stick_breaking_extrapolates_without_pe"
    (v,) = verdicts(trained("none", "softmax", {1: 1.0, 4: 3.0}), name).values()
    assert (
        v.verdict == "inconclusive" and v.reason == "needs stick_breaking with position kind none"
    )
    alone = verdicts(
        trained("none", "stick_breaking", {1: 1.0, 4: 1.05}),
        "stick_breaking_extrapolates_without_pe",
    )
    assert alone["copy @ 4x: rise"].verdict == "holds"
    assert alone["copy @ 4x: vs none"].reason == "needs NoPE softmax (kind none)"


def attention_frame(masses: dict[str, float], layers: int = 2) -> pl.DataFrame:
    """Attention rows at L_train per attention function -> first-token mass (layer l adds
    0.1 l - 0.05: the mean over layers is the given mass; seed s adds 0.01 s); a row per
    head is there too, with a mass far off, to show it is not read."""
    rows = []
    for attention, mass in masses.items():
        for s in SEEDS:
            (base,) = [r for r in trial_rows("rope", s, {1: 0.0}, config=fn(attention))]
            for layer in range(layers):
                value = mass + 0.1 * layer - 0.05 * (layers - 1) + 0.01 * s
                for head, cell in ((None, value), (0, 9.0)):
                    rows.append(
                        {**base, "mode": "attention", "layer": layer, "head": head,
                         "first_token_mass": cell}
                    )  # fmt: skip
    return pl.DataFrame(rows, infer_schema_length=None)


@pytest.mark.parametrize(("gated_mass", "verdict"), [(0.1, "holds"), (0.7, "fails")])
def test_gating_lowers_first_token_mass(gated_mass: float, verdict: str) -> None:
    """Softmax's mass 0.6, gated's 0.1 -> effect 0.5 (holds); gated 0.7 -> -0.1 (fails)."""
    rows = trained("rope", "softmax", {1: 1.0}) + trained("rope", "gated", {1: 1.0})
    frame = pl.DataFrame(rows, infer_schema_length=None)
    masses = attention_frame({"softmax": 0.6, "gated": gated_mass})
    ev = Evidence.from_frames(frame, None, None, masses, n_boot=400)
    (v,) = judge(ev, ["gating_lowers_first_token_mass"])
    assert v.scope == "copy: rope +gated vs rope"
    assert v.effect == pytest.approx(0.6 - gated_mass) and v.verdict == verdict


def test_gating_without_attention_rows_is_inconclusive() -> None:
    rows = trained("rope", "softmax", {1: 1.0}) + trained("rope", "gated", {1: 1.0})
    (v,) = verdicts(rows, "gating_lowers_first_token_mass").values()
    assert v.verdict == "inconclusive" and "eval.attention_stats: true" in v.reason


@pytest.mark.parametrize(("gated_loss", "verdict"), [(1.5, "holds"), (2.5, "fails")])
def test_gating_improves_yarn_extension(gated_loss: float, verdict: str) -> None:
    """Under yarn x4 at 4x: softmax 2.0, gated 1.5 -> 0.5 (holds), 2.5 -> -0.5 (fails). The
    rows as trained (gated far worse at 4x) are not read."""
    yarn = {"method": "yarn", "factor": 4.0}
    rows = trained("rope", "softmax", {1: 1.0, 4: 6.0})
    rows += trained("rope", "gated", {1: 1.0, 4: 9.0})
    rows += trained("rope", "softmax", {1: 1.0, 4: 2.0}, **yarn)
    rows += trained("rope", "gated", {1: 1.0, 4: gated_loss}, **yarn)
    (v,) = verdicts(rows, "gating_improves_yarn_extension").values()
    assert v.scope == "copy: rope +gated vs rope, yarn x4 @ 4x"
    assert v.effect == pytest.approx(2.0 - gated_loss) and v.verdict == verdict


def test_gating_without_yarn_is_inconclusive() -> None:
    rows = trained("rope", "softmax", {1: 1.0, 4: 6.0}) + trained("rope", "gated", {1: 1, 4: 5})
    (v,) = verdicts(rows, "gating_improves_yarn_extension").values()
    assert v.verdict == "inconclusive" and "under yarn" in v.reason


@pytest.mark.parametrize(
    ("sink_loss", "verdict"),
    [(2.0, "holds"), (2.0 + SINK_TOLERANCE, "inconclusive"), (2.5, "fails")],
)
def test_sinks_stabilise_sliding_windows(sink_loss: float, verdict: str) -> None:
    """At 4x (the longest): without sinks 2.0. Equal losses hold (within the tolerance);
    a gap of the tolerance, with seeds 0.01 apart, straddles it; 2.5 fails. A full
    attention model with sinks has no windowed twin and is not judged."""
    rows = trained("rope", "softmax", {1: 1.0, 2: 1.5, 4: 2.0}, layers=WINDOWS)
    rows += trained("rope", "sinks", {1: 1.0, 2: 1.5, 4: sink_loss}, layers=WINDOWS)
    rows += trained("rope", "sinks", {1: 1.0, 2: 1.5, 4: 9.0}) + trained(
        "rope", "softmax", {1: 1, 4: 9}
    )
    (v,) = verdicts(rows, "sinks_stabilise_sliding_windows").values()
    assert v.scope == "copy @ 4x: rope [rope.w8 | rope] +sinks vs rope [rope.w8 | rope]"
    assert v.effect == pytest.approx(sink_loss - 2.0) and v.verdict == verdict


def test_sinks_without_a_windowed_pair_is_inconclusive() -> None:
    rows = trained("rope", "sinks", {1: 1.0, 4: 2.0}) + trained("rope", "softmax", {1: 1, 4: 2})
    (v,) = verdicts(rows, "sinks_stabilise_sliding_windows").values()
    assert v.verdict == "inconclusive" and "sliding-window layout" in v.reason


def drope_rows(drope_loss: float) -> list:
    """RoPE as trained, NTK x2 / x4, YaRN x4 zero-shot, DroPE zero-shot and recalibrated."""
    rows = trained("rope", "softmax", {1: 1.0, 2: 5.0, 4: 8.0})
    for method, factor, curve in (
        ("ntk", 2.0, {1: 1.0, 2: 2.0, 4: 4.0}),
        ("ntk", 4.0, {1: 1.1, 2: 2.5, 4: 3.0}),
        ("yarn", 4.0, {1: 1.1, 2: 2.4, 4: 2.8}),
    ):
        rows += trained("rope", "softmax", curve, method=method, factor=factor)
    for tuned, shift in ((0, 0.5), (50, 0.0)):
        curve = {1: 1.0, 2: drope_loss + shift + 0.5, 4: drope_loss + shift}
        rows += trained("rope", "softmax", curve, method="drope", finetune=tuned)
    return rows


def test_drope_beats_ntk_and_yarn() -> None:
    """DroPE at 4x 2.0 (recalibrated) and 2.5 (zero-shot), at 2x 0.5 more. At 2x: NTK x2 2.0,
    YaRN x4 (its only factor) 2.4 -> recalibrated min(-0.5, -0.1) (fails), zero-shot -1.0.
    At 4x: NTK x4 3.0, YaRN x4 2.8 -> recalibrated 0.8 (holds), zero-shot 0.3 (holds)."""
    got = verdicts(drope_rows(2.0), "drope_beats_ntk_and_yarn")
    stages = ("zero-shot", "recalibrated")
    assert set(got) == {f"copy @ {r}x: DroPE {s}" for r in (2, 4) for s in stages}
    at4 = got["copy @ 4x: DroPE recalibrated"]
    assert at4.effect == pytest.approx(0.8) and at4.verdict == "holds"
    assert at4.numbers == pytest.approx({"drope": 2.005, "ntk x4": 3.005, "yarn x4": 2.805})
    assert got["copy @ 4x: DroPE zero-shot"].effect == pytest.approx(0.3)
    assert got["copy @ 4x: DroPE zero-shot"].verdict == "holds"
    assert got["copy @ 2x: DroPE recalibrated"].effect == pytest.approx(-0.5)
    assert got["copy @ 2x: DroPE recalibrated"].verdict == "fails"
    assert got["copy @ 2x: DroPE zero-shot"].effect == pytest.approx(-1.0)
    assert got["copy @ 2x: DroPE zero-shot"].verdict == "fails"


def test_drope_without_a_scaling_is_inconclusive() -> None:
    rows = [r for r in drope_rows(2.0) if r["method"] not in ("ntk", "yarn")]
    (v,) = verdicts(rows, "drope_beats_ntk_and_yarn").values()
    assert v.verdict == "inconclusive" and "zero-shot ntk or yarn" in v.reason


def test_attention_rows_load_from_a_run_directory(tmp_path) -> None:
    """`evidence` of a store reads its mode "attention" rows: the synthetic store's mass at
    L_train in layer l is 0.6 / (1 + l + 0.1 seed), so seed 0 averages (0.6 + 0.3) / 2."""
    from rope_lab.analysis.claims import evidence as load
    from rope_lab.analysis.claims.attention import first_token_mass
    from tests.analysis.plots.synthetic import make_store

    masses = first_token_mass(load(make_store(tmp_path)), "passkey")
    seed0 = masses.filter(pl.col("trial_id") == "passkey-alibi-w32-s0")
    assert seed0.get_column("value").to_list() == pytest.approx([0.45])
    assert len(masses) == masses.get_column("trial_id").n_unique() == 16

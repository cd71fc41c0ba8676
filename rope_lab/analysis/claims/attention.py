"""Claims about what attention computes (`model.attention_fn`) and DroPE: forgetting and
stick-breaking attention extrapolate, gates lower the first token's attention mass and help
YaRN, sinks steady sliding windows, dropping RoPE beats rescaling it.

An attention variant's arm is its plain variant, ``"<kind> +<attention_fn>"`` (``"rope +fox"``,
``"none +stick_breaking"``); its reference is the softmax variant of the same kind (``"rope"``,
``"none"``), trained alike. Losses are nats per token, read past L_train
(`measures.loss_past_train`) on each model as trained unless a claim names a scaling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import polars as pl

from rope_lab.analysis.claims.arms import arm, trained_rows
from rope_lab.analysis.claims.base import (
    Claim,
    Direction,
    Evidence,
    Stat,
    Verdict,
    claim,
    gap,
    judge_arms,
    missing,
    per_seed,
)
from rope_lab.analysis.claims.measures import (
    arm_mean,
    factor_for_ratio,
    loss_past_train,
    ratios,
    rise_past_train,
    scaling_factors,
    scaling_rows,
)
from rope_lab.analysis.claims.scaling import smallest_gap
from rope_lab.analysis.curve_labels import KIND

ATTENTION_FN = "model.attention_fn"
PAST = 4.0  # the length ratio the extrapolation claims read
RISE_TOLERANCE = 0.1  # nats stick-breaking attention may rise at 4x over its loss at L_train
SINK_TOLERANCE = 0.02  # nats a sliding-window layout with sinks may lose to one without
DROPE_RATIOS = (2.0, 4.0, 8.0)
WINDOWED = re.compile(r"\.w\d+")  # a layout with a sliding-window layer kind: 'rope.w8'


def attention_variants(rows: pl.DataFrame, fns: Sequence[str], kind: str | None = None) -> list:
    """The plain variants ``"<kind> +<fn>"`` of ``rows`` whose attention function is one of
    ``fns`` (and position kind ``kind`` when given), sorted."""
    if rows.is_empty() or ATTENTION_FN not in rows.columns:
        return []
    rows = rows.filter(pl.col(ATTENTION_FN).is_in(list(fns)))
    if kind is not None:
        rows = rows.filter(pl.col(KIND) == kind)
    plain = pl.concat_str([pl.col(KIND), pl.lit(" +"), pl.col(ATTENTION_FN)])
    return sorted(set(rows.filter(pl.col("variant") == plain).get_column("variant").to_list()))


def reference_of(variant: str) -> str:
    """The softmax variant of the same position kind: ``"rope +fox"`` -> ``"rope"``."""
    return variant.split(" +", 1)[0]


def _pairs(ev: Evidence, task: str, fns: Sequence[str], kind: str | None = None) -> list:
    """(variant, softmax reference) pairs trained on ``task``, both present."""
    rows = trained_rows(ev, task)
    present = set(rows.get_column("variant").to_list()) if len(rows) else set()
    return [
        (v, reference_of(v))
        for v in attention_variants(rows, fns, kind)
        if reference_of(v) in present
    ]


def _judged(
    ev: Evidence,
    meta: Claim,
    scope: str,
    arms: Mapping[str, Sequence[float]],
    stat: Stat,
    threshold: float = 0.0,
    direction: Direction = ">",
) -> Verdict:
    """:func:`judge_arms`, or inconclusive naming the arms without rows."""
    empty = [name for name, values in arms.items() if not values]
    if empty:
        return missing(meta, scope, f"no rows for {', '.join(empty)}")
    return judge_arms(ev, meta, scope, arms, stat, threshold=threshold, direction=direction)


@claim(
    "forgetting_extrapolates",
    statement=f"the Forgetting Transformer (attention_fn fox or fox_pro) has lower loss past "
    f"L_train at {PAST:g} x L_train than softmax RoPE trained alike (effect = loss(RoPE) - "
    "loss(FoX), one scope per FoX variant)",
    source="Lin et al., ICLR 2025 (Forgetting Transformer: softmax attention with a forget gate)",
    order=400,
)
def forgetting_extrapolates(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task and FoX variant: per-seed loss past L_train at 4x, RoPE minus FoX > 0."""
    out = []
    for task in ev.tasks():
        rows = trained_rows(ev, task)
        fox = attention_variants(rows, ("fox", "fox_pro"))
        if not fox or "rope" not in set(rows.get_column("variant").to_list()):
            out.append(missing(meta, task, "needs FoX (fox or fox_pro) and softmax RoPE"))
            continue
        if PAST not in ratios(ev, task):
            out.append(missing(meta, task, f"not evaluated at {PAST:g} x L_train"))
            continue
        values = loss_past_train(ev, task, PAST)
        for variant in fox:
            arms = {variant: arm(values, [variant]), "rope": arm(values, ["rope"])}
            scope = f"{task} @ {PAST:g}x: {variant} vs rope"
            out.append(_judged(ev, meta, scope, arms, gap("rope", variant)))
    return out


@claim(
    "stick_breaking_extrapolates_without_pe",
    statement=f"stick-breaking attention with no position encoding keeps its loss past L_train "
    f"at {PAST:g} x L_train within {RISE_TOLERANCE:g} nats of its loss at L_train (scope "
    "'rise': effect = the rise) and below NoPE softmax's (scope 'vs none': effect = "
    "loss(none) - loss(none +stick_breaking))",
    source="Tan et al. 2025 (Scaling Stick-Breaking Attention: length generalisation without "
    "position embeddings)",
    order=410,
)
def stick_breaking_extrapolates_without_pe(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task: the rise of ``none +stick_breaking`` < tolerance; NoPE minus it > 0."""
    out = []
    for task in ev.tasks():
        found = attention_variants(trained_rows(ev, task), ("stick_breaking",), "none")
        if not found:
            out.append(missing(meta, task, "needs stick_breaking with position kind none"))
            continue
        if PAST not in ratios(ev, task):
            out.append(missing(meta, task, f"not evaluated at {PAST:g} x L_train"))
            continue
        variant, head = found[0], f"{task} @ {PAST:g}x"
        rise = {variant: arm(rise_past_train(ev, task, PAST), [variant])}
        stat = arm_mean(variant)
        out.append(_judged(ev, meta, f"{head}: rise", rise, stat, RISE_TOLERANCE, "<"))
        if not _pairs(ev, task, ("stick_breaking",), "none"):
            out.append(missing(meta, f"{head}: vs none", "needs NoPE softmax (kind none)"))
            continue
        values = loss_past_train(ev, task, PAST)
        arms = {variant: arm(values, [variant]), "none": arm(values, ["none"])}
        out.append(_judged(ev, meta, f"{head}: vs none", arms, gap("none", variant)))
    return out


def first_token_mass(ev: Evidence, task: str) -> pl.DataFrame:
    """Per trial as trained: ``first_token_mass`` at L_train, the mean over layers of the
    heads' mean (rows ``head`` null); ``trial_id``, ``variant``, ``train.seed``, ``value``."""
    rows = ev.attention.filter(
        (pl.col("task") == task)
        & pl.col("trained")
        & (pl.col("finetune_steps").fill_null(0) == 0)
        & pl.col("head").is_null()
        & (pl.col("length") == pl.col("train.length"))
    )
    mass = pl.col("first_token_mass").cast(pl.Float64).fill_nan(None).mean().alias("value")
    return rows.group_by("trial_id", "variant", "train.seed").agg(mass)


@claim(
    "gating_lowers_first_token_mass",
    statement="a sigmoid gate on the attention output (attention_fn gated, gated_head) lowers "
    "the attention mass on the first token at L_train (mean over layers and heads; effect = "
    "mass(softmax) - mass(gated), same position kind)",
    source="Qiu et al. 2025 (Gated Attention for Large Language Models: non-linearity, "
    "sparsity and attention-sink-free)",
    order=420,
)
def gating_lowers_first_token_mass(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task and gated variant: per-seed first-token mass, softmax minus gated > 0."""
    out = []
    for task in ev.tasks():
        pairs = _pairs(ev, task, ("gated", "gated_head"))
        if not pairs:
            out.append(missing(meta, task, "needs a gated variant and softmax of its kind"))
            continue
        values = first_token_mass(ev, task) if not ev.attention.is_empty() else pl.DataFrame()
        for variant, reference in pairs:
            scope = f"{task}: {variant} vs {reference}"
            arms = {v: arm(values, [v]) if len(values) else [] for v in (variant, reference)}
            if not all(arms.values()):
                why = "needs attention statistics at L_train (eval.attention_stats: true)"
                out.append(missing(meta, scope, why))
                continue
            out.append(_judged(ev, meta, scope, arms, gap(reference, variant)))
    return out


@claim(
    "gating_improves_yarn_extension",
    statement="under YaRN at the same factor f, zero-shot, gated attention has lower loss past "
    "L_train at f x L_train than softmax RoPE (effect = loss(rope) - loss(rope +gated))",
    source="Qiu et al. 2025 (Gated Attention for Large Language Models: gating improves "
    "context-length extension with YaRN)",
    order=430,
)
def gating_improves_yarn_extension(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, gated RoPE variant and YaRN factor f evaluated at f x L_train: RoPE minus
    gated > 0."""
    out = []
    for task in ev.tasks():
        pairs = _pairs(ev, task, ("gated", "gated_head"), "rope")
        evaluated = ratios(ev, task)
        factors = [f for f in scaling_factors(ev, task, "yarn") if f > 1 and f in evaluated]
        if not pairs or not factors:
            why = "needs rope +gated and rope under yarn, evaluated at the factor x L_train"
            out.append(missing(meta, task, why))
            continue
        for variant, reference in pairs:
            for factor in factors:
                yarn = _yarn_rows(factor, [variant, reference])
                values = loss_past_train(ev, task, factor, yarn)
                arms = {v: arm(values, [v]) for v in (variant, reference)}
                scope = f"{task}: {variant} vs {reference}, yarn x{factor:g} @ {factor:g}x"
                if not all(arms.values()):
                    out.append(missing(meta, scope, "one arm has no yarn rows"))
                    continue
                out.append(_judged(ev, meta, scope, arms, gap(reference, variant)))
    return out


def _yarn_rows(factor: float, variants: list[str]) -> pl.Expr:
    return (
        (pl.col("method") == "yarn")
        & ((pl.col("factor") - factor).abs() < 1e-9)
        & (pl.col("finetune_steps").fill_null(0) == 0)
        & pl.col("variant").is_in(variants)
    )


def windowed_sink_pairs(rows: pl.DataFrame) -> list[tuple[str, str]]:
    """(with sinks, without) variant pairs of ``rows`` whose layout has a sliding-window layer
    kind (``"rope [rope.w8 | rope] +sinks"``, ``"rope [rope.w8 | rope]"``), both present."""
    if rows.is_empty() or ATTENTION_FN not in rows.columns:
        return []
    present = set(rows.get_column("variant").to_list())
    sinks = rows.filter(pl.col(ATTENTION_FN) == "sinks").get_column("variant").unique()
    pairs = {(v, v.removesuffix(" +sinks")) for v in sinks.to_list() if v.endswith(" +sinks")}
    return sorted(p for p in pairs if p[1] in present and WINDOWED.search(p[1]))


@claim(
    "sinks_stabilise_sliding_windows",
    statement=f"a layout with sliding-window layers and learned sinks (attention_fn sinks) has "
    f"loss past L_train, at the longest evaluated length, no higher than the same layout "
    f"without sinks (effect = loss(sinks) - loss(softmax); holds below {SINK_TOLERANCE:g} nats)",
    source="OpenAI 2025 (gpt-oss model card: sinks in alternating sliding-window layers); "
    "Xiao et al., ICLR 2024 (StreamingLLM: attention sinks keep windowed attention stable)",
    order=440,
)
def sinks_stabilise_sliding_windows(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task and windowed layout: per-seed loss past L_train, sinks minus softmax < tol."""
    out = []
    for task in ev.tasks():
        pairs = windowed_sink_pairs(trained_rows(ev, task))
        longest = max(ratios(ev, task), default=1.0)
        if not pairs or longest <= 1:
            why = "needs a sliding-window layout with and without sinks, evaluated past L_train"
            out.append(missing(meta, task, why))
            continue
        values = loss_past_train(ev, task, longest)
        for variant, reference in pairs:
            arms = {v: arm(values, [v]) for v in (variant, reference)}
            scope = f"{task} @ {longest:g}x: {variant} vs {reference}"
            stat = gap(variant, reference)
            out.append(_judged(ev, meta, scope, arms, stat, SINK_TOLERANCE, "<"))
    return out


@claim(
    "drope_beats_ntk_and_yarn",
    statement="DroPE (RoPE removed after training; zero-shot, or recalibrated by fine-tuning at "
    "L_train) has lower loss past L_train at 2, 4 and 8 x L_train than zero-shot NTK-aware and "
    "YaRN scaling, each at its largest factor <= the ratio (effect = the smallest "
    "loss(method) - loss(DroPE))",
    source="Gelberg and Cetin, ICLR 2026 (DroPE: extending the context by dropping positional "
    "embeddings)",
    order=450,
)
def drope_beats_ntk_and_yarn(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, evaluated ratio of 2-8x and DroPE stage: min over NTK, YaRN of the loss gap."""
    out = []
    for task in ev.tasks():
        evaluated = [r for r in DROPE_RATIOS if r in ratios(ev, task)]
        stages = [t for t in (False, True) if scaling_factors(ev, task, "drope", finetuned=t)]
        scaled = [m for m in ("ntk", "yarn") if scaling_factors(ev, task, m)]
        if not evaluated or not stages or not scaled:
            why = "needs RoPE under drope and zero-shot ntk or yarn, evaluated at 2, 4 or 8x"
            out.append(missing(meta, task, why))
            continue
        for ratio in evaluated:
            for tuned in stages:
                drope = loss_past_train(ev, task, ratio, scaling_rows("drope", finetuned=tuned))
                arms = {"drope": per_seed(drope)}
                for method in scaled:
                    factor = factor_for_ratio(scaling_factors(ev, task, method), ratio)
                    rows = scaling_rows(method, factor)
                    arms[f"{method} x{factor:g}"] = per_seed(loss_past_train(ev, task, ratio, rows))
                stage = "recalibrated" if tuned else "zero-shot"
                scope = f"{task} @ {ratio:g}x: DroPE {stage}"
                worse = [name for name in arms if name != "drope"]
                stat = smallest_gap(worse, ["drope"])
                out.append(_judged(ev, meta, scope, arms, stat))
    return out

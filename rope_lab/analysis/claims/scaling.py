"""Claims about RoPE scaling methods applied to a trained RoPE model (zero-shot or fine-tuned).

They read plain RoPE models (variant ``"rope"``): the rows as trained are direct extrapolation,
rows with a ``method`` are that scaling at its ``factor``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rope_lab.analysis.claims.base import (
    Claim,
    Evidence,
    Stat,
    Verdict,
    claim,
    judge_arms,
    judge_gap,
    missing,
    per_seed,
)
from rope_lab.analysis.claims.measures import (
    ROPE,
    arm_mean,
    factor_for_ratio,
    loss_past_train,
    ratio_at_most,
    ratios,
    scaling_factors,
    scaling_rows,
)
from rope_lab.analysis.curve_labels import TEMPERATURE
from rope_lab.analysis.length_report import SHORT_RATIOS, short_context_delta

EXACT_TOLERANCE = 1e-6  # nats: float32 forwards of identical frequencies agree to ~1e-7
SHORT_CONTEXT_TOLERANCE = 0.05  # nats of loss a method may add at 0.25-1 x L_train
ZERO_SHOT_BETTER = ("dynamic", "yarn", "ntk")
ZERO_SHOT_WORSE = ("direct", "linear")


def _direct_rows() -> pl.Expr:
    return (
        pl.col("trained")
        & (pl.col("finetune_steps").fill_null(0) == 0)
        & (pl.col("variant") == ROPE)
    )


def smallest_gap(worse: Sequence[str], better: Sequence[str]) -> Stat:
    """The statistic min over pairs of mean(worse arm) - mean(better arm)."""
    return lambda m: min(m[w] - m[b] for w in worse for b in better)


def _exact(meta: Claim, scope: str, worst: dict[str, float]) -> Verdict:
    """An exact claim: holds when every trial's largest difference is within tolerance."""
    effect = max(worst.values())
    verdict = "holds" if effect <= EXACT_TOLERANCE else "fails"
    return Verdict(
        claim=meta.name,
        scope=scope,
        statement=meta.statement,
        verdict=verdict,
        effect=effect,
        ci_low=min(worst.values()),
        ci_high=effect,
        threshold=EXACT_TOLERANCE,
        direction="<",
        seeds=len(worst),
        numbers=worst,
        source=meta.source,
    )


@claim(
    "dynamic_equals_direct",
    statement=f"dynamic NTK equals direct RoPE at every evaluated length <= L_train (effect = "
    f"largest |loss difference| over trials, lengths and factors; tolerance "
    f"{EXACT_TOLERANCE:g} nats)",
    source="Peng et al. 2023 (YaRN), section 3.3 / docs/science.md: dynamic scaling leaves "
    "the base unchanged for L <= L_train by construction",
    order=100,
)
def dynamic_equals_direct(ev: Evidence, meta: Claim) -> list[Verdict]:
    """max |loss(dynamic) - loss(direct)| over lengths <= L_train, per task."""
    out = []
    for task in ev.tasks():
        rows = ev.eval.filter(
            (pl.col("task") == task) & (pl.col("length") <= pl.col("train.length"))
        )
        dyn = rows.filter(scaling_rows("dynamic")).select(
            "trial_id", "length", pl.col("loss").alias("dynamic")
        )
        direct = rows.filter(_direct_rows()).select("trial_id", "length", "loss")
        both = dyn.join(direct, on=["trial_id", "length"])
        if both.is_empty():
            out.append(
                missing(
                    meta,
                    task,
                    "needs RoPE evaluated under dynamic at lengths <= L_train",
                )
            )
            continue
        worst = both.group_by("trial_id").agg((pl.col("dynamic") - pl.col("loss")).abs().max())
        out.append(
            _exact(
                meta,
                task,
                {t: float(v) for t, v in worst.sort("trial_id").iter_rows()},
            )
        )
    return out


@claim(
    "zero_shot_ordering",
    statement="zero-shot, dynamic NTK, YaRN and NTK-aware scaling each beat direct "
    "extrapolation and PI past L_train (effect = smallest loss(worse) - loss(better) over "
    "the pairs; each method at its largest factor <= the length ratio)",
    source="Peng et al. 2023 (YaRN) and docs/science.md: zero-shot dynamic >= NTK > PI >> direct",
    order=110,
)
def zero_shot_ordering(ev: Evidence, meta: Claim) -> list[Verdict]:
    """min over better x worse pairs of loss(worse) - loss(better) > 0, at 4x and at 8x."""
    out = []
    for task in ev.tasks():
        for ratio in (4.0, 8.0):
            scope = f"{task} @ {ratio:g}x"
            if ratio not in ratios(ev, task):
                out.append(missing(meta, scope, f"not evaluated at {ratio:g} x L_train"))
                continue
            arms: dict[str, list[float]] = {}
            direct = loss_past_train(ev, task, ratio, _direct_rows())
            if not direct.is_empty():
                arms["direct"] = per_seed(direct)
            for method in ("linear", *ZERO_SHOT_BETTER):
                factor = factor_for_ratio(scaling_factors(ev, task, method), ratio)
                if factor is None:
                    continue
                rows = loss_past_train(ev, task, ratio, scaling_rows(method, factor))
                if not rows.is_empty():
                    arms[method if method != "linear" else "linear"] = per_seed(rows)
            better = [m for m in ZERO_SHOT_BETTER if arms.get(m)]
            worse = [m for m in ZERO_SHOT_WORSE if arms.get(m)]
            if not better or not worse:
                out.append(
                    missing(
                        meta, scope, "needs RoPE under dynamic/yarn/ntk and direct or linear (PI)"
                    )
                )
                continue
            out.append(
                judge_arms(
                    ev,
                    meta,
                    scope,
                    {k: arms[k] for k in (*better, *worse)},
                    smallest_gap(worse, better),
                    threshold=0.0,
                    direction=">",
                )
            )
    return out


@claim(
    "pi_costs_in_distribution",
    statement="PI (linear scaling) costs loss inside the trained window: effect = loss(PI) - "
    "loss(direct) at L_train, zero-shot",
    source="Chen et al. 2023 (position interpolation): 0.01-0.05 perplexity lost inside the "
    "original window",
    order=120,
)
def pi_costs_in_distribution(ev: Evidence, meta: Claim) -> list[Verdict]:
    """loss(linear x f, L_train) - loss(direct, L_train) > 0 for each factor f."""
    out = []
    for task in ev.tasks():
        factors = scaling_factors(ev, task, "linear")
        direct = loss_past_train(ev, task, 1.0, _direct_rows())
        if not factors or direct.is_empty():
            out.append(missing(meta, task, "needs RoPE under linear scaling evaluated at L_train"))
            continue
        for factor in factors:
            pi = loss_past_train(ev, task, 1.0, scaling_rows("linear", factor))
            arms = {"linear": per_seed(pi), "direct": per_seed(direct)}
            out.append(judge_gap(ev, meta, f"{task}: linear x{factor:g}", arms, "linear", "direct"))
    return out


@claim(
    "pi_finetune_recovers",
    statement="a short fine-tune at the target length recovers PI: effect = loss(PI zero-shot) "
    "- loss(PI fine-tuned) past L_train at the target length factor x L_train",
    source="Chen et al. 2023 (position interpolation): 16.10 -> 7.12 ppl at 8192 tokens "
    "after 200 fine-tuning steps",
    order=130,
)
def pi_finetune_recovers(ev: Evidence, meta: Claim) -> list[Verdict]:
    """loss(linear zero-shot) - loss(linear fine-tuned) > 0 at each fine-tuned factor."""
    out = []
    for task in ev.tasks():
        tuned = scaling_factors(ev, task, "linear", finetuned=True)
        if not tuned:
            out.append(missing(meta, task, "needs RoPE fine-tuned under linear scaling"))
            continue
        for factor in tuned:
            ratio = ratio_at_most(ev, task, factor)
            if ratio is None:
                continue
            zero = loss_past_train(ev, task, ratio, scaling_rows("linear", factor))
            ft = loss_past_train(ev, task, ratio, scaling_rows("linear", factor, finetuned=True))
            if zero.is_empty() or ft.is_empty():
                out.append(
                    missing(meta, task, f"linear x{factor:g}: needs zero-shot and fine-tuned rows")
                )
                continue
            arms = {"zero_shot": per_seed(zero), "finetuned": per_seed(ft)}
            out.append(
                judge_gap(
                    ev,
                    meta,
                    f"{task}: linear x{factor:g} @ {ratio:g}x",
                    arms,
                    "zero_shot",
                    "finetuned",
                )
            )
    return out


@claim(
    "pi_finetune_beats_control",
    statement="fine-tuned PI beats fine-tuning unscaled RoPE for the same steps at the target "
    "length: effect = loss(default fine-tuned) - loss(PI fine-tuned) past L_train",
    source="Chen et al. 2023 (position interpolation): direct fine-tuning reached only 2560 "
    "tokens after 10k steps where PI reached 8192 after 200",
    order=140,
)
def pi_finetune_beats_control(ev: Evidence, meta: Claim) -> list[Verdict]:
    """loss(default fine-tuned) - loss(linear fine-tuned) > 0 at each factor both have."""
    out = []
    for task in ev.tasks():
        tuned = set(scaling_factors(ev, task, "linear", finetuned=True))
        control = set(scaling_factors(ev, task, "default", finetuned=True))
        if not tuned or not control:
            out.append(
                missing(
                    meta,
                    task,
                    "needs RoPE fine-tuned under linear scaling and "
                    "unscaled (method default) at the same factor",
                )
            )
            continue
        for factor in sorted(tuned & control):
            ratio = ratio_at_most(ev, task, factor)
            if ratio is None:
                continue
            pi = loss_past_train(ev, task, ratio, scaling_rows("linear", factor, finetuned=True))
            ctl = loss_past_train(ev, task, ratio, scaling_rows("default", factor, finetuned=True))
            arms = {"control": per_seed(ctl), "linear": per_seed(pi)}
            out.append(
                judge_gap(ev, meta, f"{task}: x{factor:g} @ {ratio:g}x", arms, "control", "linear")
            )
    return out


@claim(
    "method_keeps_short_context",
    statement=f"a zero-shot RoPE scaling keeps the model's short-context quality: its loss at "
    f"{SHORT_RATIOS[0]:g}-{SHORT_RATIOS[1]:g} x L_train exceeds the unscaled model's at the "
    f"same lengths by less than {SHORT_CONTEXT_TOLERANCE} nats (effect = mean over those "
    "lengths of loss(method) - loss(as trained), per method and factor)",
    source="the source notes (004_3fef522a1d9c2040.txt, section 12: short-context regression "
    "of each extension method); Chen et al. 2023 (position interpolation costs loss inside the "
    "original window); Peng et al. 2023 (YaRN, dynamic scaling leaves it unchanged)",
    order=150,
)
def method_keeps_short_context(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, method and factor: the per-trial mean of loss(method) - loss(as trained) over
    the lengths in [0.25, 1] x L_train both have, averaged per seed, < the tolerance."""
    out = []
    for task in ev.tasks():
        rows = ev.eval.filter(
            (pl.col("task") == task)
            & (pl.col("variant") == ROPE)
            & (pl.col("length") >= SHORT_RATIOS[0] * pl.col("train.length"))
            & (pl.col("length") <= SHORT_RATIOS[1] * pl.col("train.length"))
        )
        direct: dict[str, dict[int, float | None]] = {}
        for trial, length, loss in (
            rows.filter(_direct_rows())
            .select("trial_id", "length", pl.col("loss").cast(pl.Float64))
            .iter_rows()
        ):
            direct.setdefault(trial, {})[length] = loss
        scaled = rows.filter(
            ~pl.col("trained")
            & (pl.col("finetune_steps").fill_null(0) == 0)
            & (pl.col("method") != TEMPERATURE)
        )
        pairs = sorted(set(scaled.select("method", "factor").iter_rows()))
        if not direct or not pairs:
            out.append(
                missing(
                    meta,
                    task,
                    f"needs RoPE as trained and under a zero-shot scaling at "
                    f"{SHORT_RATIOS[0]:g}-{SHORT_RATIOS[1]:g} x L_train",
                )
            )
            continue
        for method, factor in pairs:
            per_trial = []
            one = scaled.filter((pl.col("method") == method) & (pl.col("factor") == factor))
            for (trial, seed), group in one.group_by("trial_id", "train.seed"):
                delta = short_context_delta(
                    group.get_column("length").to_list(),
                    group.get_column("loss").cast(pl.Float64).to_list(),
                    direct.get(str(trial), {}),
                    int(group.get_column("train.length")[0]),
                )
                if delta is not None:
                    per_trial.append({"train.seed": seed, "value": delta})
            scope = f"{task}: {method} x{factor:g}"
            if not per_trial:
                out.append(missing(meta, scope, "no length both it and RoPE as trained have"))
                continue
            out.append(
                judge_arms(
                    ev,
                    meta,
                    scope,
                    {method: per_seed(pl.DataFrame(per_trial))},
                    arm_mean(method),
                    threshold=SHORT_CONTEXT_TOLERANCE,
                    direction="<",
                )
            )
    return out


@claim(
    "stale_cache_hurts_dynamic",
    statement="decoding under dynamic NTK with a stale cache (keys keep the rotation of the "
    "shorter sequence they were cached in) answers worse past L_train than recomputing the "
    "whole prefix at its length (effect = decode accuracy of per_step_full minus "
    "per_step_stale, averaged over lengths > L_train)",
    source="docs/science.md (RoPE extension: dynamic scaling under a KV cache); the Hugging "
    "Face transformers discussion of dynamic NTK with cached keys",
    order=170,
)
def stale_cache_hurts_dynamic(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task with decode rows: per-seed answer accuracy past L_train, full vs stale."""
    if ev.decode.is_empty():
        return [missing(meta, "all tasks", "needs decode rows (eval.decode.protocols)")]
    out = []
    for task in sorted(ev.decode.get_column("task").unique().drop_nulls().to_list()):
        rows = ev.decode.filter(
            (pl.col("task") == task)
            & (pl.col("method") == "dynamic")
            & (pl.col("length") > pl.col("train.length"))
        )
        arms = {
            p: per_seed(rows.filter(pl.col("protocol") == p), "accuracy")
            for p in ("per_step_full", "per_step_stale")
        }
        if not all(arms.values()):
            out.append(
                missing(meta, task, "needs dynamic decoded per_step_full and per_step_stale")
            )
            continue
        out.append(judge_gap(ev, meta, task, arms, "per_step_full", "per_step_stale"))
    return out

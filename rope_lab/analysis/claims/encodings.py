"""Claims about position encodings as trained: who degrades past L_train, and by how much.

"Rise" is the loss on the positions >= L_train of a sequence of k x L_train minus the loss at
L_train (:func:`rope_lab.analysis.claims.measures.rise_past_train`); "score" is accuracy on
synthetic tasks and minus the loss on language-modelling tasks, so higher is better for both.
Arms of a family are selected by what encodings declare (:mod:`.arms`), never by name lists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import polars as pl

from rope_lab.analysis.claims.arms import (
    Arms,
    arm,
    by_family,
    compare,
    compare_per_task,
    plain_variants,
    trained_rows,
)
from rope_lab.analysis.claims.base import (
    Claim,
    Evidence,
    Verdict,
    claim,
    decide,
    gap,
    judge_arms,
    judge_gap,
    missing,
    per_seed,
)
from rope_lab.analysis.claims.measures import (
    loss_past_train,
    ratio_at_most,
    ratios,
    rise_past_train,
)

ALIBI_TOLERANCE = 0.1  # nats of loss
NOPE_TOLERANCE = 0.05  # accuracy (or nats of loss on text)
SEED_SPREAD_RATIO = 0.5
FAMILY_RATIO = 4.0
UNLEARNED_NATS = 0.5


def score_past_train(ev: Evidence, task: str, rows: pl.Expr | None = None) -> pl.DataFrame:
    """Per trial: the score (accuracy, or -loss on text) past L_train, averaged over every
    evaluated ratio > 1."""
    metric = "loss" if ev.is_text(task) else "accuracy"
    sign = -1.0 if metric == "loss" else 1.0
    parts = [loss_past_train(ev, task, r, rows, metric) for r in ratios(ev, task) if r > 1]
    if not parts:
        return pl.DataFrame()
    frame = pl.concat(parts)
    keys = ["trial_id", "variant", "train.seed", "method", "factor"]
    return frame.group_by(keys).agg((sign * pl.col("value").mean()).alias("value"))


@claim(
    "absolute_degrade_more",
    statement="absolute encodings (learned, sinusoidal) lose more past L_train than relative "
    "ones (RoPE, ALiBi, T5 bias, KERPLE, FIRE, xPos: every plain encoding of the relative "
    "family): effect = rise(absolute) - rise(relative)",
    source="Press et al. 2022 (ALiBi), WikiText-103, L_train 512: sinusoidal 20.05 -> 43.54 "
    "ppl at 1012 tokens, rotary 20.07 -> 21.37, ALiBi 19.73 -> 18.73",
    order=10,
)
def absolute_degrade_more(ev: Evidence, meta: Claim) -> list[Verdict]:
    """rise(absolute) - rise(relative) > 0 at 2x and at 4x, per task."""
    return compare_per_task(
        ev,
        meta,
        arms=lambda task: by_family(trained_rows(ev, task), "absolute", "relative"),
        values=lambda task, ratio: rise_past_train(ev, task, ratio),
        stat=gap("absolute", "relative"),
        needs="needs an absolute and a relative encoding",
        at=(2.0, 4.0),
    )


@claim(
    "alibi_flat",
    statement=f"ALiBi stays flat to 8x: its largest rise at any evaluated length up to "
    f"8 x L_train is below {ALIBI_TOLERANCE} nats",
    source="Press et al. 2022 (ALiBi), WikiText-103: 19.73 ppl at L_train 512, 18.41 at "
    "2512, 18.31 at 15512",
    order=20,
)
def alibi_flat(ev: Evidence, meta: Claim) -> list[Verdict]:
    """max_k rise(ALiBi, k) < tolerance over evaluated k in (1, 8]."""
    out = []
    for task in ev.tasks():
        ks = [r for r in ratios(ev, task) if 1 < r <= 8]
        if "alibi" not in ev.variants(task) or not ks:
            out.append(missing(meta, task, "needs ALiBi evaluated past L_train"))
            continue
        rises = pl.concat([rise_past_train(ev, task, k) for k in ks])
        worst = (
            rises.filter(pl.col("variant") == "alibi")
            .group_by("trial_id", "train.seed")
            .agg(pl.col("value").max())
        )
        verdict = judge_arms(
            ev,
            meta,
            f"{task} to {max(ks):g}x",
            {"alibi": per_seed(worst)},
            lambda m: m["alibi"],
            threshold=ALIBI_TOLERANCE,
            direction="<",
        )
        out.append(verdict)
    return out


@claim(
    "rope_between",
    statement="RoPE lies between ALiBi and the absolute encodings past L_train: effect = "
    "min(rise(RoPE) - rise(ALiBi), rise(absolute) - rise(RoPE)) at 4x",
    source="Press et al. 2022 (ALiBi), WikiText-103: at 2512 tokens ALiBi 18.41 < rotary "
    "31.6 < sinusoidal 132.4 ppl",
    order=30,
)
def rope_between(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Both gaps of the ordering ALiBi < RoPE < absolute positive at the largest ratio <= 4."""

    def arms(task: str) -> Arms:
        present = ev.variants(task)
        named = {kind: [kind] if kind in present else [] for kind in ("alibi", "rope")}
        return {**named, "absolute": plain_variants(trained_rows(ev, task), family="absolute")}

    return compare_per_task(
        ev,
        meta,
        arms=arms,
        values=lambda task, ratio: rise_past_train(ev, task, ratio),
        stat=lambda m: min(m["rope"] - m["alibi"], m["absolute"] - m["rope"]),
        needs="needs RoPE, ALiBi and an absolute encoding past 1x",
        at=lambda task: ratio_at_most(ev, task, 4.0),
    )


@claim(
    "nope_competitive",
    statement=f"NoPE is competitive on synthetic tasks: its score past L_train is within "
    f"{NOPE_TOLERANCE} of the best other encoding as trained (effect = NoPE - best)",
    source="Kazemnejad et al. 2023 (NoPE): mean rank NoPE ~ T5 bias > ALiBi > rotary ~ "
    "absolute over 10 synthetic tasks x 3 seeds",
    order=40,
)
def nope_competitive(ev: Evidence, meta: Claim) -> list[Verdict]:
    """score(NoPE) - max over the other plain encodings of their score > -tolerance."""
    out = []
    for task in ev.tasks():
        if ev.is_text(task):
            continue
        plain = plain_variants(trained_rows(ev, task))
        others = [v for v in plain if v != "none"]
        arms = {v: [v] for v in ("none", *others)} if "none" in plain and others else {}
        verdict = compare(
            ev,
            meta,
            task,
            score_past_train(ev, task),
            arms,
            lambda m: m["none"] - max(v for k, v in m.items() if k != "none"),
            needs="needs NoPE and another encoding",
            empty="not evaluated past L_train",
            threshold=-NOPE_TOLERANCE,
        )
        out.append(verdict)
    return out


@claim(
    "randomized_helps",
    statement="training on randomised positions raises the score past L_train over the same "
    "encoding trained on positions 0..L-1 (effect = randomised - plain, mean over encodings)",
    source="Ruoss et al. 2023 (randomized positional encodings): +12.0% mean accuracy on "
    "longer test lengths over 15 tasks",
    order=50,
)
def randomized_helps(ev: Evidence, meta: Claim) -> list[Verdict]:
    """score(kind +randomized) - score(kind), averaged over kinds with both, > 0."""
    needs = (
        "needs an encoding trained with and without randomised positions, evaluated past L_train"
    )
    out = []
    for task in ev.tasks():
        present = ev.variants(task)
        pairs = sorted(v for v in present if f"{v} +randomized" in present)
        arms = {"randomized": [f"{v} +randomized" for v in pairs], "plain": pairs}
        score = score_past_train(ev, task)
        stat = gap("randomized", "plain")
        out.append(compare(ev, meta, task, score, arms, stat, needs=needs, empty=needs))
    return out


def spread_ratio(groups: Sequence[np.ndarray]) -> float:
    """Mean within-group std (ddof 1) over the std (ddof 1) of the group means; inf when the
    means are all equal, NaN when nothing varies at all. ``groups``: per-seed values of each
    encoding, each (n_seeds >= 2,)."""
    within = float(np.mean([g.std(ddof=1) for g in groups]))
    between = float(np.std([g.mean() for g in groups], ddof=1))
    if between > 0:
        return within / between
    return float("inf") if within > 0 else float("nan")


@claim(
    "seed_variance_large",
    statement=f"seed-to-seed spread is large next to the differences between encodings: mean "
    f"within-encoding seed std of the score past L_train / std of the encodings' means "
    f">= {SEED_SPREAD_RATIO}",
    source="Zhou et al. 2024 (transformers can achieve length generalization but not "
    "robustly): length generalisation varies widely across seeds",
    order=60,
)
def seed_variance_large(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Within-variant seed std over between-variant std of means; interval by resampling
    variants."""
    out = []
    for task in ev.tasks():
        score = score_past_train(ev, task)
        if score.is_empty():
            out.append(missing(meta, task, "not evaluated past L_train"))
            continue
        per_variant = {v: arm(score, [v]) for v in sorted(ev.variants(task))}
        seeded = {v: np.asarray(x) for v, x in per_variant.items() if len(x) >= 2}
        if len(seeded) < 3:
            out.append(missing(meta, task, "needs >= 3 encodings with >= 2 seeds each"))
            continue
        names = sorted(seeded)
        point = spread_ratio([seeded[v] for v in names])
        rng = np.random.default_rng(ev.seed)
        draws = [
            spread_ratio([seeded[v] for v in rng.choice(names, size=len(names))])
            for _ in range(ev.n_boot)
        ]
        if np.isnan(point):
            out.append(missing(meta, task, "no spread at all: every seed of every encoding "
                               "scores the same"))  # fmt: skip
            continue
        defined = np.asarray([d for d in draws if not np.isnan(d)])  # inf: equal means drawn
        q = [0.5 * (1 - ev.level), 0.5 * (1 + ev.level)]
        lo, hi = np.quantile(defined, q, method="inverted_cdf")  # no inf - inf interpolation
        verdict = decide(float(lo), float(hi), SEED_SPREAD_RATIO, ">")
        out.append(
            Verdict(
                claim=meta.name,
                scope=task,
                statement=meta.statement,
                verdict=verdict,
                effect=point,
                ci_low=float(lo),
                ci_high=float(hi),
                threshold=SEED_SPREAD_RATIO,
                direction=">",
                seeds=min(len(x) for x in seeded.values()),
                numbers={v: float(x.std(ddof=1)) for v, x in seeded.items()},
                source=meta.source,
                reason="" if verdict != "inconclusive" else "the interval straddles the ratio",
            )
        )
    return out


# One claim per family added to the method space: the variant's rise past L_train (at the
# largest evaluated ratio <= 4) is below its reference's, same task. A pattern matches the
# variant labels of `rope_lab.analysis.curve_labels.variant_expr`.
FAMILIES: tuple[tuple[str, str, str, str, int], ...] = (
    (
        "t5_beats_rope",
        r"t5_bias",
        "rope",
        "Press et al. 2022 (ALiBi), WikiText-103: T5 bias 20.4 vs rotary 31.6 ppl at 2512 tokens",
        70,
    ),
    (
        "kerple_log_beats_alibi",
        r"kerple_log",
        "alibi",
        "Chi et al. 2022 (KERPLE): the log kernel extrapolates better than ALiBi in their "
        "language-modelling experiments",
        71,
    ),
    (
        "kerple_power_beats_rope",
        r"kerple_power",
        "rope",
        "Chi et al. 2022 (KERPLE): the power kernel extrapolates better than rotary in their "
        "language-modelling experiments",
        72,
    ),
    (
        "fire_beats_rope",
        r"fire( .*)?",
        "rope",
        "Li et al. 2023 (FIRE): better length generalisation than RoPE and the additive "
        "biases in language modelling",
        73,
    ),
    (
        "cope_beats_rope",
        r"cope( .*)?",
        "rope",
        "Golovneva et al. 2024 (CoPE): generalises to longer contexts than RoPE on counting, "
        "flip-flop and language modelling",
        74,
    ),
    (
        "partial_rope_beats_rope",
        r"rope rotary_fraction [0-9.e-]+",
        "rope",
        "Barbero et al. 2024 (round and round we go, p-RoPE) report better perplexity from "
        "rotating part of each head; that it extrapolates further is this lab's question",
        75,
    ),
    (
        "nope_layers_beat_rope",
        r"rope \[.*none.*\]",
        "rope",
        "Yang et al. 2025 (RoPE to NoPE and back again); Llama 4's iRoPE: NoPE layers "
        "interleaved with RoPE layers extrapolate further",
        76,
    ),
    (
        "ssmax_beats_softmax",
        r"(.*) \+SSMax",
        r"\1",
        "Nakanishi 2025 (Scalable-Softmax): lower loss past the training length",
        77,
    ),
    (
        "pose_beats_plain",
        r"(.*) \+PoSE [0-9]+",
        r"\1",
        "Zhu et al. 2024 (PoSE): training on skipped position ids extends the usable "
        "context to the target length",
        78,
    ),
)


def not_learned(ev: Evidence, task: str, variant: str, reference: str) -> str:
    """Why ``variant`` cannot be compared past L_train with ``reference`` because it did not
    learn the task at L_train (accuracy below half the reference's; on text, loss more than
    ``UNLEARNED_NATS`` above it), or '' when it did: a model that never learned does not
    "degrade" past L_train, and its flat curve would read as extrapolation."""
    metric = "loss" if ev.is_text(task) else "accuracy"
    at_train = loss_past_train(ev, task, 1.0, metric=metric)
    mine, theirs = arm(at_train, [variant]), arm(at_train, [reference])
    if not mine or not theirs:
        return ""
    a, b = float(np.mean(mine)), float(np.mean(theirs))
    if metric == "accuracy" and a < 0.5 * b:
        return f"{variant} did not learn the task at L_train (accuracy {a:.3g} vs {b:.3g})"
    if metric == "loss" and a > b + UNLEARNED_NATS:
        return f"{variant} did not learn the task at L_train (loss {a:.3g} vs {b:.3g})"
    return ""


def _family_claim(name: str, pattern: str, reference: str, source: str, order: int) -> None:
    statement = (
        f"variants matching {pattern!r} rise less past L_train than their reference "
        f"({reference!r}) at the largest evaluated ratio <= {FAMILY_RATIO:g}: effect = "
        "rise(reference) - rise(variant)"
    )

    @claim(name, statement=statement, source=source, order=order)
    def judge(ev: Evidence, meta: Claim) -> list[Verdict]:
        out = []
        for task in ev.tasks():
            present = sorted(ev.variants(task))
            matches = [(v, re.fullmatch(pattern, v)) for v in present]
            pairs = [(v, m.expand(reference)) for v, m in matches if m is not None]
            pairs = [(v, r) for v, r in pairs if r in present and r != v]
            ratio = ratio_at_most(ev, task, FAMILY_RATIO)
            if not pairs or ratio is None:
                out.append(missing(meta, task, "no variant with its reference past 1x"))
                continue
            rise = rise_past_train(ev, task, ratio)
            for variant, ref in pairs:
                scope = f"{task} @ {ratio:g}x: {variant} vs {ref}"
                unlearned = not_learned(ev, task, variant, ref)
                if unlearned:
                    out.append(missing(meta, scope, unlearned))
                    continue
                arms = {"variant": arm(rise, [variant]), "reference": arm(rise, [ref])}
                out.append(judge_gap(ev, meta, scope, arms, "reference", "variant"))
        return out


for _family in FAMILIES:
    _family_claim(*_family)


@claim(
    "temperature_helps",
    statement="the zero-shot log-length attention temperature lowers the loss past L_train of "
    "the model as trained at the largest evaluated ratio <= 4 (effect = rise(as trained) - "
    "rise(temperature)), per encoding",
    source="Chiang and Cholak 2022 (logits scaled by log n); Peng et al. 2023 (YaRN) "
    "attention temperature; the entropy-invariance argument",
    order=79,
)
def temperature_helps(ev: Evidence, meta: Claim) -> list[Verdict]:
    """rise(as trained) - rise(method "temperature") > 0 for each variant with both."""
    out = []
    for task in ev.tasks():
        ratio = ratio_at_most(ev, task, FAMILY_RATIO)
        temp_rows = (pl.col("method") == "temperature") & (
            pl.col("finetune_steps").fill_null(0) == 0
        )
        if ratio is None:
            out.append(missing(meta, task, "not evaluated past L_train"))
            continue
        warm = rise_past_train(ev, task, ratio, temp_rows)
        if warm.is_empty():
            out.append(missing(meta, task, "no temperature stage (eval.zero_shot_temperature)"))
            continue
        cold = rise_past_train(ev, task, ratio)
        for variant in sorted(set(warm.get_column("variant").to_list())):
            arms = {"trained": arm(cold, [variant]), "temperature": arm(warm, [variant])}
            if not arms["trained"]:
                continue
            out.append(
                judge_gap(
                    ev, meta, f"{task} @ {ratio:g}x: {variant}", arms, "trained", "temperature"
                )
            )
    return out

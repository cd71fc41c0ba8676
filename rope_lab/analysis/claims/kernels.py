"""Claims of the source documents about the empirical NTK (docs/science.md): the tail kernel
of absolute encodings collapses through training, shift-invariant encodings have a shift-
invariant kernel, and the kernel moves less from its initialisation as the width grows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import polars as pl

from rope_lab.analysis.claims.arms import arm, arm_values, by_family, complete, plain_variants
from rope_lab.analysis.claims.base import (
    Claim,
    Evidence,
    Stat,
    Verdict,
    claim,
    decide,
    judge_arms,
    missing,
    per_seed,
)
from rope_lab.analysis.curve_labels import LAZY_SUFFIX

SHIFT_TOLERANCE = 0.01
TAIL_RATIO = 4.0


def ntk_metric(ev: Evidence, task: str, metric: str, kernel: str | None = "ntk") -> pl.DataFrame:
    """NTK-table rows of ``metric`` for ``task``: whole-model group, as trained, of ``kernel``
    (the table's ``kernel`` column, ``ntk`` where absent; None: every kernel)."""
    if ev.ntk.is_empty():
        return pl.DataFrame()
    rows = ev.ntk.filter(
        (pl.col("task") == task)
        & (pl.col("metric") == metric)
        & (pl.col("group") == "total")
        & pl.col("trained")
    )
    if kernel is not None and "kernel" in rows.columns:
        rows = rows.filter(pl.col("kernel").fill_null("ntk") == kernel)
    return rows


def ntk_tasks(ev: Evidence) -> list[str]:
    """Tasks with NTK rows, sorted."""
    if ev.ntk.is_empty():
        return []
    return sorted(ev.ntk.get_column("task").unique().drop_nulls().to_list())


@claim(
    "tail_kernel_collapse",
    statement=f"through training, the tail-kernel cosine between the positions >= L_train of "
    f"{TAIL_RATIO:g} x L_train probes and the training probes falls for absolute encodings "
    f"and not for relative ones: effect = min(-change(absolute), change(relative) - "
    f"change(absolute)), change = last step - step 0",
    source="source documents, section on K_cross -> 0 for absolute encodings "
    "(docs/science.md, claims 1-2)",
    order=200,
)
def tail_kernel_collapse(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Changes of ``tail_cos_mean`` at the 4x probe from step 0 to the last step."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = ntk_metric(ev, task, "tail_cos_mean")
        if rows.is_empty():
            out.append(missing(meta, task, "no tail_cos_mean rows (NTK tracking off?)"))
            continue
        rows = rows.filter(
            (pl.col("probe_length") - pl.col("train.length") * TAIL_RATIO).abs() < 0.5
        )
        first = rows.filter(pl.col("step") == pl.col("step").min().over("trial_id"))
        last = rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))
        change = last.join(first.select("trial_id", pl.col("value").alias("v0")), on="trial_id")
        change = change.with_columns((pl.col("value") - pl.col("v0")).alias("value"))
        arms = by_family(change, "absolute", "relative")
        if not complete(arms):
            out.append(
                missing(
                    meta,
                    task,
                    f"needs absolute and relative encodings with a {TAIL_RATIO:g}x probe",
                )
            )
            continue
        out.append(
            judge_arms(
                ev,
                meta,
                f"{task} @ {TAIL_RATIO:g}x",
                arm_values(change, arms),
                lambda m: min(-m["absolute"], m["relative"] - m["absolute"]),
                threshold=0.0,
                direction=">",
            )
        )
    return out


def _invariance_margin(absolute: Sequence[str], invariant: Sequence[str]) -> Stat:
    """min(smallest absolute error - largest invariant one, tolerance - largest invariant one)."""

    def margin(m: Mapping[str, float]) -> float:
        worst = max(m[v] for v in invariant)
        return min(min(m[a] for a in absolute) - worst, SHIFT_TOLERANCE - worst)

    return margin


@claim(
    "shift_invariance",
    statement=f"the NTK of encodings whose logits are unchanged by a common position offset "
    f"(RoPE, ALiBi, NoPE, T5 bias, KERPLE, CoPE, xPos) is shift invariant and that of absolute "
    f"encodings is not: effect = min(error(absolute) - error(invariant), {SHIFT_TOLERANCE} - "
    f"error(invariant)), error = the relative shift-invariance error at the last step",
    source="source documents, translation invariance of the relative-encoding NTK "
    "(docs/science.md, claim 3)",
    order=210,
)
def shift_invariance(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Largest error of a shift-invariant encoding below tolerance and below the smallest
    absolute one."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = ntk_metric(ev, task, "shift_invariance_error")
        if rows.is_empty():
            out.append(missing(meta, task, "no shift_invariance_error rows"))
            continue
        last = rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))
        absolute = plain_variants(last, family="absolute")
        invariant = plain_variants(last, shift_invariant=True)
        if not absolute or not invariant:
            out.append(missing(meta, task, "needs absolute and relative encodings"))
            continue
        arms = {v: arm(last, [v]) for v in (*absolute, *invariant)}
        out.append(
            judge_arms(
                ev,
                meta,
                task,
                arms,
                _invariance_margin(absolute, invariant),
                threshold=0.0,
                direction=">",
            )
        )
    return out


@claim(
    "drift_falls_with_width",
    statement="under the NTK parametrisation the kernel's relative change from initialisation "
    "falls with width: effect = the log-log slope of the last step's relative change vs "
    "width (bootstrap over seeds)",
    source="Lee et al. 2019; docs/science.md (kernel drift with width): |Theta_t - Theta_0| "
    "shrinks like width^-1/2 to width^-1",
    order=220,
)
def drift_falls_with_width(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Slope of log relative_change vs log width < 0, per task and variant with >= 2 widths."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = ntk_metric(ev, task, "relative_change")
        if "model.parametrization" in rows.columns:
            rows = rows.filter(pl.col("model.parametrization") == "ntk")
        if not rows.is_empty():  # a linearised twin's kernel does not move, by construction
            rows = rows.filter(~pl.col("variant").str.ends_with(LAZY_SUFFIX))
        if rows.is_empty():
            out.append(missing(meta, task, "needs NTK-parametrised trials with NTK tracking"))
            continue
        out += width_slopes(ev, meta, task, rows, "relative_change")
    return out


def width_slopes(
    ev: Evidence, meta: Claim, task: str, rows: pl.DataFrame, metric: str
) -> list[Verdict]:
    """Per variant of ``rows`` (one ``metric`` value per trial): the log-log slope of
    ``metric`` vs width < 0, with its bootstrap interval over seeds (resampled as wholes);
    inconclusive with fewer than 2 widths or ``ev.min_seeds`` seeds per width."""
    from rope_lab.analysis.fits import drift_slope
    from rope_lab.analysis.query import ntk_final

    out = []
    for variant in sorted(set(rows.get_column("variant").to_list())):
        mine = rows.filter(pl.col("variant") == variant)
        if mine.get_column("model.width").n_unique() < 2:
            out.append(missing(meta, f"{task}: {variant}", "needs >= 2 widths"))
            continue
        if not (ntk_final(mine, metric).get_column("value").cast(pl.Float64) > 0).all():
            reason = f"{metric} is not positive in every trial: no log-log slope"
            out.append(missing(meta, f"{task}: {variant}", reason))
            continue
        fit = drift_slope(mine, metric=metric, seed=ev.seed, n_boot=ev.n_boot)
        lo, hi = fit.ci
        seeds = min(len(per_seed(g)) for _, g in mine.group_by("model.width"))
        verdict = decide(lo, hi, 0.0, "<") if seeds >= ev.min_seeds else "inconclusive"
        if seeds < ev.min_seeds:
            reason = f"{seeds} seed(s) per width"
        elif math.isnan(lo):
            reason = "the slope's interval needs >= 3 seeds (resampled as wholes)"
        else:
            reason = "" if verdict != "inconclusive" else "the slope's interval straddles 0"
        out.append(
            Verdict(
                claim=meta.name, scope=f"{task}: {variant}", statement=meta.statement,
                verdict=verdict, effect=fit.slope, ci_low=lo, ci_high=hi, threshold=0.0,
                direction="<", seeds=seeds, numbers={"r2": fit.r2, "points": fit.n},
                source=meta.source, reason=reason,
            )
        )  # fmt: skip
    return out

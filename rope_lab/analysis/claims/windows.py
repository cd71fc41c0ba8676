"""Claims about layer layouts under evaluation-time scaling: should sliding-window layers be
scaled with the rest? Open models chose differently (OLMo 3 scales only its full-attention
layers, Gemma 3's local layers keep their base); a layout whose window kinds keep the trained
frequencies (`eval_scaling: false`, variant '... .fixed') is the other arm of one whose window
kinds are scaled too, trained alike.
"""

from __future__ import annotations

import polars as pl

from rope_lab.analysis.claims.base import Claim, Evidence, Verdict, claim, judge_gap, missing
from rope_lab.analysis.claims.measures import loss_past_train, ratios
from rope_lab.analysis.curve_labels import TEMPERATURE

SCALED, FIXED = "window layers scaled", "window layers as trained"
TIE = (
    "the arms are equal: the method changes nothing inside the window (a remap whose window "
    "is wider than the sliding window)"
)


def fixed_pairs(variants: set[str]) -> list[tuple[str, str]]:
    """(scaled, fixed) variant pairs: a layout with '.fixed' window kinds and the same layout
    without it, both present, sorted."""
    return sorted(
        (v.replace(".fixed", ""), v)
        for v in variants
        if ".fixed" in v and v.replace(".fixed", "") in variants
    )


@claim(
    "scaled_window_layers_extrapolate_better",
    statement="under an evaluation-time RoPE scaling or remap, a layout's sliding-window layers "
    "extrapolate better scaled with the rest than left as trained (effect = loss past L_train "
    "of the window-as-trained arm minus the scaled arm, at the longest evaluated length, per "
    "method, factor and fine-tuning; on a task scored by accuracy, scaled minus as trained): "
    "'fails' means leaving them as trained is better",
    source="issue of rope_lab's extension study: OLMo 3 (scaling applied to full-attention "
    "layers only) and Gemma 3 (local layers at base 1e4, unscaled) chose differently",
    order=155,
)
def scaled_window_layers_extrapolate_better(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, layout pair, method, factor and fine-tuning: per-seed difference past L_train
    at the longest ratio, scaled arm better > 0."""
    out = []
    for task in ev.tasks():
        rows = ev.eval.filter((pl.col("task") == task) & ~pl.col("trained"))
        rows = rows.filter(pl.col("method") != TEMPERATURE)
        pairs = fixed_pairs(
            set(rows.get_column("variant").unique().to_list()) if len(rows) else set()
        )
        longest = max(ratios(ev, task), default=1.0)
        if not pairs or longest <= 1:
            out.append(
                missing(
                    meta,
                    task,
                    "needs a layout evaluated under a scaling past L_train with its window "
                    "kinds scaled and, trained alike, left as trained (eval_scaling: false)",
                )
            )
            continue
        text = ev.is_text(task)
        metric = "loss" if text else "accuracy"
        for scaled, fixed in pairs:
            for tuned in (False, True):
                ft = pl.col("finetune_steps").fill_null(0)
                selected = (
                    pl.col("variant").is_in([scaled, fixed])
                    & ~pl.col("trained")
                    & (pl.col("method") != TEMPERATURE)
                    & ((ft > 0) if tuned else (ft == 0))
                )
                past = loss_past_train(ev, task, longest, selected, metric)
                how = "fine-tuned" if tuned else "zero-shot"
                for (method, factor), group in sorted(
                    past.group_by("method", "factor"), key=lambda g: (str(g[0][0]), g[0][1])
                ):
                    arms = {
                        name: _per_seed(group.filter(pl.col("variant") == variant))
                        for name, variant in ((SCALED, scaled), (FIXED, fixed))
                    }
                    scope = f"{task}: {scaled} vs .fixed, {method} x{factor:g} {how}, {longest:g}x"
                    if not arms[SCALED] or not arms[FIXED]:
                        out.append(missing(meta, scope, "one arm has no rows"))
                        continue
                    if arms[SCALED] == arms[FIXED]:  # the method leaves the window kinds alone
                        out.append(missing(meta, scope, TIE))
                        continue
                    larger, smaller = (FIXED, SCALED) if text else (SCALED, FIXED)
                    out.append(judge_gap(ev, meta, scope, arms, larger, smaller))
    return out


def _per_seed(frame: pl.DataFrame) -> list[float]:
    if frame.is_empty():
        return []
    by_seed = frame.group_by("train.seed").agg(pl.col("value").mean()).sort("train.seed")
    return by_seed.drop_nulls("value").get_column("value").to_list()

"""Claims on RULER's effective length (`measures.effective_length`): the longest evaluated
length up to which every length, from the shortest, scores at or above an absolute bar."""

from __future__ import annotations

import polars as pl

from rope_lab.analysis.claims.base import Claim, Evidence, Verdict, claim, judge_gap, missing
from rope_lab.analysis.claims.measures import ROPE, effective_length
from rope_lab.analysis.curve_labels import TEMPERATURE
from rope_lab.analysis.length_report import THRESHOLD


@claim(
    "method_extends_effective_length",
    statement=f"a zero-shot RoPE scaling or relative-position remap extends RULER's effective "
    f"length (every evaluated length up to it scores accuracy >= {THRESHOLD:g}) past the "
    "model's as trained (effect = effective length under the method minus as trained, in "
    "units of L_train, per method and factor; a curve that misses the bar at its shortest "
    "length counts 0)",
    source="Hsieh et al. 2024 (RULER: effective length, the longest length that passes a "
    "threshold); Peng et al. 2023 and Chen et al. 2023 (scalings extend the usable context); "
    "Su 2023, Jin et al. 2024, An et al. 2024 (remaps extend it without training)",
    order=152,
)
def method_extends_effective_length(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per scored task, method and factor: per-seed effective length (method) - (as trained)."""
    out = []
    for task in ev.tasks():
        if ev.is_text(task):
            out.append(missing(meta, task, "effective length is RULER's for scored tasks"))
            continue
        plain = pl.col("variant") == ROPE
        zero_shot = pl.col("finetune_steps").fill_null(0) == 0
        direct = effective_length(ev, task, rows=plain & pl.col("trained") & zero_shot)
        scaled_rows = plain & ~pl.col("trained") & zero_shot & (pl.col("method") != TEMPERATURE)
        scaled = effective_length(ev, task, rows=scaled_rows)
        if direct.is_empty() or scaled.is_empty():
            out.append(missing(meta, task, "needs RoPE as trained and under a zero-shot method"))
            continue
        base = _per_seed(direct)
        for (method, factor), group in sorted(
            scaled.group_by("method", "factor"), key=lambda g: (str(g[0][0]), g[0][1])
        ):
            arms = {str(method): _per_seed(group), "as trained": base}
            scope = f"{task}: {method} x{factor:g}"
            out.append(judge_gap(ev, meta, scope, arms, str(method), "as trained"))
    return out


def _per_seed(frame: pl.DataFrame) -> list[float]:
    """Mean effective length per seed, a null (bar missed at once) counted 0."""
    filled = frame.with_columns(pl.col("value").fill_null(0.0))
    by_seed = filled.group_by("train.seed").agg(pl.col("value").mean()).sort("train.seed")
    return by_seed.get_column("value").to_list()

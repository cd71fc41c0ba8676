"""Arms of claims: encodings selected by what they declare, and arms compared per task and ratio.

A claim never lists the encodings of a family by name: it takes the *plain* variants (a kind at
its defaults, nothing else changing how positions enter: the variant is the kind's name) whose
encoding declares an attribute of ``EncodingConfig.attributes`` (family, rotary,
additive_bias, learned, shift_invariant). Rows carry them as ``encoding.<attribute>`` columns;
rows written before those columns get them from the registered kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import polars as pl

from rope_lab.analysis.claims.base import (
    Claim,
    Direction,
    Evidence,
    Stat,
    Verdict,
    judge_arms,
    missing,
    per_seed,
)
from rope_lab.analysis.claims.measures import ratios
from rope_lab.analysis.curve_labels import KIND
from rope_lab.results.columns import ENCODING_PREFIX, VARIANT_SCHEMA

Arms = Mapping[str, Sequence[str]]  # arm name -> the variants pooled in it


def attribute_expr(rows: pl.DataFrame, name: str) -> pl.Expr:
    """Per row, the attribute ``name`` its encoding declares: the ``encoding.<name>`` column
    where set, else ``POSITIONS[kind].attributes()[name]`` (null for a kind not registered)."""
    column = f"{ENCODING_PREFIX}{name}"
    dtype = VARIANT_SCHEMA[column]
    unset = rows.filter(pl.col(column).is_null()) if column in rows.columns else rows
    kinds = set(unset.get_column(KIND).drop_nulls().to_list()) if KIND in rows.columns else set()
    declared: dict[str, str | bool] = {}
    if kinds:
        from rope_lab.registry import POSITIONS  # only for rows without the columns

        declared = {k: POSITIONS[k].attributes()[name] for k in kinds if k in POSITIONS}
    fallback = pl.lit(None, dtype)
    if declared:
        fallback = pl.col(KIND).replace_strict(declared, default=None, return_dtype=dtype)
    return pl.col(column).cast(dtype).fill_null(fallback) if column in rows.columns else fallback


def plain_variants(rows: pl.DataFrame, **declared: str | bool) -> list[str]:
    """The plain variants of ``rows`` whose encoding declares every attribute of ``declared``
    (``family="absolute"``, ``shift_invariant=True``), sorted."""
    if rows.is_empty():
        return []
    rows = rows.filter(pl.col("variant") == pl.col(KIND))
    for name, value in declared.items():
        rows = rows.filter(attribute_expr(rows, name) == value)
    return sorted(set(rows.get_column("variant").to_list()))


def by_family(rows: pl.DataFrame, *families: str) -> dict[str, list[str]]:
    """Arms named by their family: the plain variants of each of ``families`` in ``rows``."""
    return {family: plain_variants(rows, family=family) for family in families}


def trained_rows(ev: Evidence, task: str) -> pl.DataFrame:
    """The eval rows of ``task`` as trained (the rows :meth:`Evidence.variants` reads)."""
    return ev.eval.filter(pl.col("trained") & (pl.col("task") == task))


def arm(frame: pl.DataFrame, variants: Sequence[str]) -> list[float]:
    """Per-seed means of ``value`` over the trials of ``variants`` (seed order)."""
    return per_seed(frame.filter(pl.col("variant").is_in(list(variants))))


def arm_values(frame: pl.DataFrame, arms: Arms) -> dict[str, list[float]]:
    """Each arm's per-seed values in ``frame`` (one ``value`` per trial)."""
    return {name: arm(frame, variants) for name, variants in arms.items()}


def complete(arms: Arms) -> bool:
    """Whether there are arms and each has a variant."""
    return bool(arms) and all(arms.values())


def compare(
    ev: Evidence,
    meta: Claim,
    scope: str,
    values: pl.DataFrame,
    arms: Arms,
    stat: Stat,
    *,
    needs: str,
    empty: str = "",
    threshold: float = 0.0,
    direction: Direction = ">",
) -> Verdict:
    """``stat`` over ``arms`` of the per-trial ``values``: inconclusive with ``needs`` when an
    arm has no variant (or there are none), with ``empty`` (when given) when ``values`` is
    empty."""
    if not complete(arms):
        return missing(meta, scope, needs)
    if empty and values.is_empty():
        return missing(meta, scope, empty)
    pooled = arm_values(values, arms)
    return judge_arms(ev, meta, scope, pooled, stat, threshold=threshold, direction=direction)


def compare_per_task(
    ev: Evidence,
    meta: Claim,
    *,
    arms: Callable[[str], Arms],
    values: Callable[[str, float], pl.DataFrame],
    stat: Stat,
    needs: str,
    at: Sequence[float] | Callable[[str], float | None],
    threshold: float = 0.0,
    direction: Direction = ">",
) -> list[Verdict]:
    """``stat`` over the arms of each task at each of its ratios, scoped ``"task @ 2x"``.

    ``arms(task)``: the arms of a task; ``values(task, ratio)``: one value per trial, whose
    per-seed means fill the arms (inconclusive with ``needs`` when an arm has no variant).
    ``at``: the ratios of every task (a ratio not evaluated is inconclusive), or a function
    choosing a task's ratio (without one, or without an arm, the task is inconclusive under
    the scope ``task``)."""
    out = []
    for task in ev.tasks():
        chosen = arms(task)
        if callable(at):
            ratio = at(task)
            if ratio is None or not complete(chosen):
                out.append(missing(meta, task, needs))
                continue
            plan, evaluated = [ratio], [ratio]
        else:
            plan, evaluated = list(at), ratios(ev, task)
        for ratio in plan:
            scope = f"{task} @ {ratio:g}x"
            if not complete(chosen):
                out.append(missing(meta, scope, needs))
            elif ratio not in evaluated:
                out.append(missing(meta, scope, f"not evaluated at {ratio:g} x L_train"))
            else:
                pooled = arm_values(values(task, ratio), chosen)
                judged = judge_arms(
                    ev, meta, scope, pooled, stat, threshold=threshold, direction=direction
                )
                out.append(judged)
    return out

"""Per-trial quantities claims compare: loss past L_train, its rise over the loss at L_train.

Each returns one row per trial: ``trial_id``, ``variant``, ``train.seed``, ``value``.
"""

from __future__ import annotations

import polars as pl

from rope_lab.analysis.claims.base import Evidence

KEYS = ["trial_id", "variant", "train.seed"]


def _at_ratio(frame: pl.DataFrame, ratio: float) -> pl.DataFrame:
    target = pl.col("train.length") * ratio
    return frame.filter((pl.col("length") - target).abs() < 0.5)


def _scoped(frame: pl.DataFrame, task: str, rows: pl.Expr | None) -> pl.DataFrame:
    frame = frame.filter(pl.col("task") == task)
    return frame.filter(rows if rows is not None else pl.col("trained") & _no_finetune())


def _no_finetune() -> pl.Expr:
    return pl.col("finetune_steps").fill_null(0) == 0


def loss_past_train(
    ev: Evidence, task: str, ratio: float, rows: pl.Expr | None = None, metric: str = "loss"
) -> pl.DataFrame:
    """``metric`` on the positions >= L_train of sequences of ``ratio`` x L_train: the mean of
    the position buckets that start at or past L_train when the runs have bucket rows (NaN
    buckets, with no scored token, left out), else the whole sequence's value.

    ``rows`` selects eval rows (default: each model as trained, not fine-tuned). One row per
    trial (and method/factor when ``rows`` admits several: then ``method``, ``factor`` too).
    """
    keys = [*KEYS, "method", "factor"]
    if ratio > 1 and not ev.buckets.is_empty():
        past = _at_ratio(_scoped(ev.buckets, task, rows), ratio).filter(
            pl.col("position_bucket") >= pl.col("train.length")
        )
        if not past.is_empty():
            return past.group_by(keys).agg(
                pl.col(metric).cast(pl.Float64).fill_nan(None).mean().alias("value")
            )
    whole = _at_ratio(_scoped(ev.eval, task, rows), ratio)
    return whole.select([*keys, pl.col(metric).cast(pl.Float64).alias("value")])


def rise_past_train(
    ev: Evidence, task: str, ratio: float, rows: pl.Expr | None = None, metric: str = "loss"
) -> pl.DataFrame:
    """How much ``metric`` past L_train at ``ratio`` x L_train exceeds the whole-sequence
    value at L_train, per trial (same method, factor and fine-tuning)."""
    keys = [*KEYS, "method", "factor"]
    past = loss_past_train(ev, task, ratio, rows, metric)
    base = _at_ratio(_scoped(ev.eval, task, rows), 1.0).select(
        [*keys, pl.col(metric).cast(pl.Float64).alias("base")]
    )
    joined = past.join(base, on=keys, how="inner", nulls_equal=True)
    return joined.select([*keys, (pl.col("value") - pl.col("base")).alias("value")])


def ratios(ev: Evidence, task: str) -> list[float]:
    """The evaluated length ratios (length / L_train) of ``task``, sorted."""
    rows = ev.eval.filter(pl.col("task") == task)
    if rows.is_empty():
        return []
    r = (rows.get_column("length") / rows.get_column("train.length")).round(6)
    return sorted(set(r.to_list()))


def ratio_at_most(ev: Evidence, task: str, limit: float) -> float | None:
    """The largest evaluated ratio > 1 and <= ``limit``, or None."""
    fitting = [r for r in ratios(ev, task) if 1 < r <= limit]
    return max(fitting) if fitting else None

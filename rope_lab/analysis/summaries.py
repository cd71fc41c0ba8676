"""Seed aggregation and extrapolation summaries of query tables (re-exported by
`rope_lab.analysis.query`, which users import)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import polars as pl

from rope_lab.analysis import length_report as lr
from rope_lab.analysis.query import (
    BITS_PER_BYTE,
    LOWER_IS_BETTER,
    MEASUREMENT_COLUMNS,
    RUN_COLUMNS,
    SCALING_FIELD,
    QueryError,
    Source,
    check_columns,
    eval_table,
    label_expr,
    own_field,
    trained_expr,
)


def _default_by(frame: pl.DataFrame, metric: str) -> list[str]:
    return [
        c
        for c in frame.columns
        if c not in RUN_COLUMNS and c not in MEASUREMENT_COLUMNS and c != metric
    ]


def aggregate_seeds(
    frame: pl.DataFrame,
    by: Sequence[str] | None = None,
    metric: str = "accuracy",
    *,
    ci: Literal["se", "t", "bootstrap"] = "se",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pl.DataFrame:
    """Mean of ``metric`` over seeds: columns ``by`` + mean, se, ci_low, ci_high, n.

    Groups by ``by``, default every column except trial_id, train.seed, run bookkeeping
    (status, times, ...) and measured values (loss, accuracy, value, ...). NaN/null values are
    left out (``n`` counts the rest). ``ci``: ``"se"`` = mean ± one standard error (seaborn's
    ``errorbar="se"``), ``"t"`` = Student-t interval at ``level``, ``"bootstrap"`` = percentile
    interval at ``level`` of ``n_boot`` resampled means (generator seeded with ``seed``).
    se and the interval are null for groups with fewer than two values.
    """
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if ci not in ("se", "t", "bootstrap"):
        raise QueryError(f"ci must be 'se', 't' or 'bootstrap', got {ci!r}")
    check_columns(frame, [metric], "metric")
    keys = list(by) if by is not None else _default_by(frame, metric)
    check_columns(frame, keys, "grouping")
    vals = pl.col(metric).cast(pl.Float64).fill_nan(None).drop_nulls()
    aggs = [
        vals.mean().alias("mean"),
        (vals.std(ddof=1) / vals.count().cast(pl.Float64).sqrt()).alias("se"),
        vals.count().cast(pl.Int64).alias("n"),
        vals.alias("_values"),
    ]
    if keys:
        agg = frame.group_by(keys, maintain_order=True).agg(aggs)
    else:
        agg = frame.select([*aggs[:3], vals.implode().alias("_values")])
    se = pl.when(pl.col("n") >= 2).then(pl.col("se"))
    if ci == "se":
        lo, hi = pl.col("mean") - se, pl.col("mean") + se
        agg = agg.with_columns(se.alias("se"), lo.alias("ci_low"), hi.alias("ci_high"))
    elif ci == "t":
        from scipy import stats

        n = agg.get_column("n").to_numpy()
        tq = np.where(n >= 2, stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)), np.nan)
        half = pl.Series("half", tq) * agg.get_column("se")
        agg = agg.with_columns(se.alias("se")).with_columns(
            (pl.col("mean") - half).alias("ci_low"), (pl.col("mean") + half).alias("ci_high")
        )
    else:
        rng = np.random.default_rng(seed)
        lows: list[float | None] = []
        highs: list[float | None] = []
        q = [50 * (1 - level), 50 * (1 + level)]
        for values in agg.get_column("_values").to_list():
            x = np.asarray(values, dtype=float)
            if x.size < 2:
                lows.append(None)
                highs.append(None)
                continue
            means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
            lo_b, hi_b = np.percentile(means, q)
            lows.append(float(lo_b))
            highs.append(float(hi_b))
        agg = agg.with_columns(
            se.alias("se"),
            pl.Series("ci_low", lows, dtype=pl.Float64),
            pl.Series("ci_high", highs, dtype=pl.Float64),
        )
    return agg.select([*keys, "mean", "se", "ci_low", "ci_high", "n"])


def _ratio_name(k: float) -> str:
    return f"loss_ratio_{k:g}x"


def _bucket_name(metric: str, bucket: str) -> str:
    return f"{metric}_{bucket}"


def unscaled_expr(columns: Sequence[str]) -> pl.Expr:
    """Rows of a trial's model as trained and not fine-tuned (`query.trained_expr`; in a frame
    without the trained-scaling columns, method ``"default"`` counts as trained too)."""
    as_trained = trained_expr(columns)
    if own_field(columns, SCALING_FIELD) is None:
        as_trained = as_trained | (pl.col("method") == "default")
    return as_trained & (pl.col("finetune_steps").fill_null(0) == 0)


def extrapolation_summary(
    source: Source | pl.DataFrame, *, threshold: float = lr.THRESHOLD, metric: str = "accuracy"
) -> pl.DataFrame:
    """One row per trial x (method, factor, finetune_steps): how far it extrapolates.

    ``reference`` = ``metric`` at ``train.length`` (same method/factor/fine-tuning);
    ``longest_length`` = the longest evaluated length L >= train.length such that every
    evaluated length in [train.length, L] keeps ``metric >= threshold * reference`` (for
    loss / perplexity: ``<= reference / threshold``); null without a reference. Then
    ``longest_ratio = longest_length / train.length``; ``effective_length`` (and
    ``effective_ratio``), RULER's: the longest evaluated length up to which every evaluated
    length meets an absolute bar, ``metric >= threshold`` from the shortest length for a
    score, ``metric <= (the unscaled model's metric at train.length) / threshold`` from
    train.length for a loss; and ``loss_ratio_{k}x`` = loss at k x train.length / loss at
    train.length for every evaluated k > 1. Then the source notes' report
    (`rope_lab.analysis.length_report`, which defines each): ``loss_{bucket}`` (and
    ``bits_per_byte_{bucket}`` where the rows have bits per byte), the mean over evaluated
    lengths in the buckets 0-1x, 1-2x, 2-8x and 8x+ train.length (``0_1x``, ``1_2x``,
    ``2_8x``, ``8x_up``); ``short_context_delta``, ``metric`` minus the unscaled model's at
    the same lengths, averaged over 0.25-1 x train.length (0 for the unscaled rows
    themselves; null without such lengths or the trial's unscaled rows); ``largest_jump``, the
    largest change of ``metric`` between adjacent evaluated lengths, and ``largest_jump_at``,
    the longer length of that pair. Config columns follow.
    """
    if not 0 < threshold <= 1:
        raise QueryError(f"threshold must be in (0, 1], got {threshold}")
    frame = source if isinstance(source, pl.DataFrame) else eval_table(source)
    if "position_bucket" in frame.columns:
        frame = frame.filter(pl.col("position_bucket").is_null())
    check_columns(frame, ["trial_id", "method", "factor", "finetune_steps", "length", metric])
    check_columns(frame, ["train.length", "loss"], "the summary (join the trial config)")
    if "length_ratio" not in frame.columns:
        frame = frame.with_columns(
            (pl.col("length") / pl.col("train.length")).alias("length_ratio")
        )
    if "label" not in frame.columns:
        frame = frame.with_columns(label_expr(frame.columns))
    keys = ["trial_id", "method", "factor", "finetune_steps"]
    at_train = pl.col("length") == pl.col("train.length")
    value = pl.col(metric).cast(pl.Float64)
    losses = ["loss"]
    if BITS_PER_BYTE in frame.columns and frame.get_column(BITS_PER_BYTE).is_not_null().any():
        losses.append(BITS_PER_BYTE)
    ref = value.filter(at_train).first()
    ref_loss = pl.col("loss").filter(at_train).first()
    ks = sorted(
        k for k in frame.get_column("length_ratio").unique().drop_nulls().to_list() if k > 1
    )
    out = frame.group_by(keys, maintain_order=True).agg(
        pl.col("label").first(),
        pl.col("train.length").first(),
        ref.alias("reference"),
        pl.col("length").alias("_lengths"),
        value.alias("_values"),
        *[pl.col(m).cast(pl.Float64).alias(f"_{m}") for m in losses],
        *[
            (pl.col("loss").filter(pl.col("length_ratio") == k).first() / ref_loss).alias(
                _ratio_name(k)
            )
            for k in ks
        ],
    )
    lower = metric in LOWER_IS_BETTER
    longest: list[int | None] = []
    for row in out.select("train.length", "reference", "_lengths", "_values").iter_rows():
        longest.append(_longest(*row, threshold=threshold, lower=lower))
    out = out.with_columns(pl.Series("longest_length", longest, dtype=pl.Int64)).with_columns(
        (pl.col("longest_length") / pl.col("train.length")).alias("longest_ratio")
    )
    out, report = _length_report(out, frame, value, losses, threshold=threshold, lower=lower)
    head = [
        *keys, "label", "train.length", "reference", "longest_length", "longest_ratio",
        "effective_length", "effective_ratio",
    ]  # fmt: skip
    ratios = [_ratio_name(k) for k in ks]
    config = [
        c
        for c in frame.columns
        if c not in head
        and c not in MEASUREMENT_COLUMNS
        and c not in {"step", "length", "length_ratio", "position_bucket", metric}
    ]
    config_rows = frame.group_by("trial_id", maintain_order=True).agg(
        [pl.col(c).first() for c in config if c != "trial_id"]
    )
    return (
        out.select([*head, *ratios, *report])
        .join(config_rows, on="trial_id", how="left")
        .sort(keys, nulls_last=True)
    )


def _length_report(
    out: pl.DataFrame,
    frame: pl.DataFrame,
    value: pl.Expr,
    losses: list[str],
    *,
    threshold: float,
    lower: bool,
) -> tuple[pl.DataFrame, list[str]]:
    """``out`` with the `length_report` columns of each row, and their names (after the
    effective length's): buckets of each loss, short_context_delta, largest_jump(_at)."""
    unscaled: dict[str, dict[int, float | None]] = {}
    rows = frame.filter(unscaled_expr(frame.columns)).select("trial_id", "length", value)
    for trial, length, v in rows.iter_rows():
        unscaled.setdefault(trial, {})[length] = v
    names = [_bucket_name(m, b) for m in losses for b, _, _ in lr.BUCKETS]
    columns: dict[str, list] = {
        c: [] for c in ["effective_length", *names, "short_context_delta", "largest_jump",
                        "largest_jump_at"]
    }  # fmt: skip
    picked = ["trial_id", "train.length", "_lengths", "_values", *[f"_{m}" for m in losses]]
    for trial, train_length, lengths, values, *loss_values in out.select(picked).iter_rows():
        base = unscaled.get(trial, {})
        bar = lr.effective_bar(lower, base.get(train_length), threshold)
        start = train_length if lower else 0
        columns["effective_length"].append(
            lr.effective_length(lengths, values, bar=bar, lower=lower, start=start)
        )
        for m, vs in zip(losses, loss_values, strict=True):
            for b, mean in lr.bucket_means(lengths, vs, train_length).items():
                columns[_bucket_name(m, b)].append(mean)
        columns["short_context_delta"].append(
            lr.short_context_delta(lengths, values, base, train_length)
        )
        jump, at = lr.largest_jump(lengths, values)
        columns["largest_jump"].append(jump)
        columns["largest_jump_at"].append(at)
    types = {"effective_length": pl.Int64, "largest_jump_at": pl.Int64}
    out = out.with_columns(
        pl.Series(c, v, dtype=types.get(c, pl.Float64)) for c, v in columns.items()
    ).with_columns((pl.col("effective_length") / pl.col("train.length")).alias("effective_ratio"))
    return out, [c for c in columns if c != "effective_length"]


def _longest(
    train_length: int | None,
    reference: float | None,
    lengths: list[int],
    values: list[float | None],
    *,
    threshold: float,
    lower: bool,
) -> int | None:
    if train_length is None or reference is None or math.isnan(reference):
        return None
    best: int | None = None
    for length, v in sorted(zip(lengths, values, strict=True), key=lambda t: t[0]):
        if length < train_length:
            continue
        if v is None or math.isnan(v):
            break
        if not (v <= reference / threshold if lower else v >= threshold * reference):
            break
        best = length
    return best

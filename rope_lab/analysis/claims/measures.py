"""Per-trial quantities claims compare: loss past L_train, its rise over the loss at L_train,
and how far a trial keeps its score (RULER's effective length, and the longest length kept
relative to the score at L_train).

Each returns one row per trial: ``trial_id``, ``variant``, ``train.seed``, ``value``. The
row selectors several claim families share live here too: a scaling method's rows of the plain
RoPE model (`scaling_rows`), the factors it was evaluated at and the one read at a length ratio
(`scaling_factors`, `factor_for_ratio`), and the statistic of one arm's mean (`arm_mean`).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from rope_lab.analysis import length_report as lr
from rope_lab.analysis.claims.base import Evidence, Stat

KEYS = ["trial_id", "variant", "train.seed"]
ROPE = "rope"  # the plain RoPE variant that scaling methods are applied to


def _at_ratio(frame: pl.DataFrame, ratio: float) -> pl.DataFrame:
    target = pl.col("train.length") * ratio
    return frame.filter((pl.col("length") - target).abs() < 0.5)


def _scoped(frame: pl.DataFrame, task: str, rows: pl.Expr | None) -> pl.DataFrame:
    frame = frame.filter(pl.col("task") == task)
    return frame.filter(rows if rows is not None else pl.col("trained") & _no_finetune())


def rows_at_train_length(ev: Evidence, task: str) -> pl.DataFrame:
    """``task``'s whole-sequence rows as trained (no fine-tuning) at L_train."""
    return _at_ratio(_scoped(ev.eval, task, None), 1.0)


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


def scaling_rows(method: str, factor: float | None = None, *, finetuned: bool = False) -> pl.Expr:
    """Eval rows of the plain RoPE variant under scaling ``method`` (at ``factor`` when given),
    fine-tuned (``finetune_steps`` > 0) or zero-shot."""
    ft = pl.col("finetune_steps").fill_null(0)
    rows = (pl.col("method") == method) & ((ft > 0) if finetuned else (ft == 0))
    if factor is not None:
        rows = rows & ((pl.col("factor") - factor).abs() < 1e-9)
    return rows & (pl.col("variant") == ROPE)


def scaling_factors(
    ev: Evidence, task: str, method: str, *, finetuned: bool = False
) -> list[float]:
    """The factors ``method`` was evaluated at on ``task`` (`scaling_rows`), sorted."""
    rows = ev.eval.filter((pl.col("task") == task) & scaling_rows(method, finetuned=finetuned))
    return sorted(set(rows.get_column("factor").drop_nulls().to_list())) if len(rows) else []


def factor_for_ratio(factors: list[float], ratio: float) -> float | None:
    """The largest factor <= ratio (the smallest when all are larger), None without any."""
    if not factors:
        return None
    fitting = [f for f in factors if f <= ratio + 1e-9]
    return max(fitting) if fitting else min(factors)


def arm_mean(name: str) -> Stat:
    """The statistic mean(``name`` arm)."""
    return lambda m: m[name]


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


LOWER_IS_BETTER = frozenset({"loss", "perplexity", "bits_per_byte", "error_rate"})


def _length_measure(
    ev: Evidence,
    task: str,
    rows: pl.Expr | None,
    metric: str,
    bar_of: Callable[[float | None], float | None],
    *,
    from_train: bool,
) -> pl.DataFrame:
    """Per trial (and method, factor): `lr.effective_length` of ``metric`` over its evaluated
    lengths (from L_train when ``from_train``, else from the shortest) with the bar
    ``bar_of(its value at L_train)``, divided by L_train (null where none meets the bar)."""
    keys = [*KEYS, "method", "factor"]
    lower = metric in LOWER_IS_BETTER
    frame = _scoped(ev.eval, task, rows)
    out: list[dict] = []
    for key, part in frame.group_by(keys, maintain_order=True):
        lengths = part.get_column("length").to_list()
        values = part.get_column(metric).cast(pl.Float64).to_list()
        train = int(part.get_column("train.length")[0])
        bar = bar_of(dict(zip(lengths, values, strict=True)).get(train))
        start = train if from_train else 0
        length = lr.effective_length(lengths, values, bar=bar, lower=lower, start=start)
        value = None if length is None else length / train
        out.append({**dict(zip(keys, key, strict=True)), "value": value})
    return pl.DataFrame(out, schema={**{k: frame.schema[k] for k in keys}, "value": pl.Float64})


def effective_length(
    ev: Evidence,
    task: str,
    threshold: float = lr.THRESHOLD,
    rows: pl.Expr | None = None,
    metric: str = "accuracy",
) -> pl.DataFrame:
    """RULER's effective length per trial, in units of L_train (the sweep summary's
    ``effective_length`` / L_train): the longest evaluated length up to which every evaluated
    length, from the shortest, has ``metric`` >= ``threshold`` (an absolute bar; a loss, from
    L_train: <= its value at L_train / ``threshold``). One row per trial (and method, factor);
    ``value`` null where the first length checked misses the bar."""
    lower = metric in LOWER_IS_BETTER

    def bar(at_train: float | None) -> float | None:
        return lr.effective_bar(lower, at_train, threshold)

    return _length_measure(ev, task, rows, metric, bar, from_train=lower)


def longest_kept(
    ev: Evidence,
    task: str,
    threshold: float = lr.THRESHOLD,
    rows: pl.Expr | None = None,
    metric: str = "accuracy",
) -> pl.DataFrame:
    """The sweep summary's ``longest_kept`` per trial, in units of L_train: the longest length
    from L_train up to which every evaluated length keeps ``metric`` >= ``threshold`` x its
    value at L_train (a loss: <= that value / ``threshold``); null without a value at L_train."""
    lower = metric in LOWER_IS_BETTER

    def bar(at_train: float | None) -> float | None:
        if at_train is None:
            return None
        return at_train / threshold if lower else at_train * threshold

    return _length_measure(ev, task, rows, metric, bar, from_train=True)

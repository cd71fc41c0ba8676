"""Tidy queries over one or several run directories: eval/NTK tables with their config, seed
aggregation, extrapolation summaries and safe ``--where`` filters.

Every function takes a run directory, a folder of run directories (e.g. ``runs``), a list of
them, or loaded :class:`~rope_lab.results.Results`, and returns an eager polars DataFrame. Rows
carry the flattened trial config as columns (``"model.width"``, ``"model.position.kind"``,
``"train.length"``, ...) and a ``label`` column naming the curve: the PE kind for non-RoPE
models, ``"rope"`` for RoPE as trained, and ``"rope/yarn x4"`` (plus ``" +ft100"`` after 100
fine-tuning steps) for a scaling method.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, Literal

import numpy as np
import polars as pl

from rope_lab.analysis.curve_labels import (
    FACTOR_FIELD,
    KIND,
    SCALING_FIELD,
    label_expr,
    own_field,
    trained_expr,
    trained_with_scaling,
)
from rope_lab.results import Results, RunDirError, load
from rope_lab.results.columns import TASK_METRIC_COLUMN

__all__ = [
    "FACTOR_FIELD",
    "KIND",
    "MEASUREMENT_COLUMNS",
    "RUN_COLUMNS",
    "SCALING_FIELD",
    "QueryError",
    "Source",
    "aggregate_seeds",
    "check_columns",
    "default_metric",
    "eval_table",
    "extrapolation_summary",
    "filter_where",
    "label_expr",
    "ntk_final",
    "ntk_table",
    "own_field",
    "results_of",
    "task_metrics",
    "trained_expr",
    "trained_with_scaling",
    "varying_columns",
]

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Results

# Per-trial bookkeeping that differs between seeds of one configuration (never a grouping key).
RUN_COLUMNS: Final = frozenset(
    {
        "trial_id",
        "train.seed",
        "sweep",
        "name",
        "status",
        "error",
        "wall_time_s",
        "tokens_seen",
        "started_at",
        "finished_at",
    }
)
# Measured values of the train / eval / ntk tables (never grouping keys).
MEASUREMENT_COLUMNS: Final = frozenset(
    {
        "loss",
        "perplexity",
        "accuracy",
        "exact_match",
        "error_rate",
        "value",
        "grad_norm",
        "lr",
        "tokens_per_s",
    }
)
LOWER_IS_BETTER: Final = frozenset({"loss", "perplexity", "error_rate"})


# Language-model tasks (every position scored, no single right answer): read by loss. A task's
# params class can also declare `default_metric` itself, which wins (`default_metric`).
class QueryError(ValueError):
    """A query that cannot be answered (unknown column, bad expression, no data)."""


def default_metric(task: str | None) -> str:
    """The eval metric a task's results are read by when none is asked for: its registered
    params class's ``default_metric`` ("loss" for the language-model tasks, "accuracy" for the
    synthetic ones: passkey, copy, ...); "accuracy" for no task or an unknown name."""
    if task is None:
        return "accuracy"
    from rope_lab.registry import TASKS

    if task not in TASKS:
        return "accuracy"
    return str(TASKS[task].default_metric)


def task_metrics(frame: pl.DataFrame) -> dict[str | None, str]:
    """``default_metric`` of each ``task.name`` in ``frame`` (``{None: "accuracy"}`` without
    that column), in task-name order."""
    if "task.name" not in frame.columns:
        return {None: "accuracy"}
    tasks = frame.get_column("task.name").unique().to_list()
    written: dict[str | None, str] = {}
    if TASK_METRIC_COLUMN in frame.columns:  # written with the trial (no registry import)
        pairs = frame.select("task.name", TASK_METRIC_COLUMN).drop_nulls().unique()
        written = dict(pairs.iter_rows())
    ordered = sorted(tasks, key=lambda t: (t is None, str(t)))
    return {t: written[t] if t in written else default_metric(t) for t in ordered}


def results_of(source: Source) -> Results:
    """``source`` as loaded :class:`Results` (a Results instance is returned unchanged).

    Each path is a run directory (``runs/smoke``) or a folder of run directories (``runs``,
    the ``--out`` of `rope-lab sweep run`: every child run directory is loaded); QueryError
    naming what a path holds otherwise."""
    if isinstance(source, Results):
        return source
    paths = [source] if isinstance(source, str | os.PathLike) else list(source)
    try:
        res = load([Path(p) for p in paths])
    except RunDirError as err:
        raise QueryError(str(err)) from None
    ids = res.trials.select("trial_id").collect().get_column("trial_id")
    dup = ids.filter(ids.is_duplicated()).unique().sort().to_list()
    if dup:
        raise QueryError(
            f"trial id(s) {', '.join(map(repr, dup[:5]))} appear more than once in the trials "
            f"tables of {', '.join(map(str, res.run_dirs))} (the same run given twice?)"
        )
    return res


def check_columns(frame: pl.DataFrame | pl.LazyFrame, names: Iterable[str], what: str = "") -> None:
    """Raise QueryError naming the unknown columns and listing the available ones."""
    columns = frame.collect_schema().names() if isinstance(frame, pl.LazyFrame) else frame.columns
    unknown = [n for n in names if n not in columns]
    if unknown:
        where = f" for {what}" if what else ""
        raise QueryError(
            f"unknown column(s) {', '.join(map(repr, unknown))}{where}; "
            f"available columns: {', '.join(columns)}"
        )


EVAL_MODES: Final = ("teacher_forced", "decode", "all")


def eval_table(
    source: Source, *, whole_sequence: bool = True, mode: str = "teacher_forced"
) -> pl.DataFrame:
    """Eval rows joined with their trial config, plus ``length_ratio`` and ``label``.

    ``length_ratio = length / train.length``; ``whole_sequence=False`` keeps the per-position-
    bucket rows too (``position_bucket`` = bucket start, null for the whole sequence).
    ``mode``: the teacher-forced rows (``mode`` null; what every figure and claim reads), the
    rows of answers generated with a cache (``"decode"``, with their ``protocol``), or ``"all"``.
    """
    if mode not in EVAL_MODES:
        raise QueryError(f"unknown eval mode {mode!r}; allowed: {', '.join(EVAL_MODES)}")
    res = results_of(source)
    lf = res.eval_with_config
    if whole_sequence:
        lf = lf.filter(pl.col("position_bucket").is_null())
    if mode != "all":
        decoded = pl.col("mode").fill_null("teacher_forced") == "decode"
        lf = lf.filter(decoded if mode == "decode" else ~decoded)
    columns = lf.collect_schema().names()
    extra = [label_expr(columns)]
    if "train.length" in columns:
        extra.append((pl.col("length") / pl.col("train.length")).alias("length_ratio"))
    return lf.with_columns(extra).collect()


def ntk_table(source: Source) -> pl.DataFrame:
    """NTK rows (long format) joined with their trial config, plus ``label``."""
    lf = results_of(source).with_config("ntk")
    return lf.with_columns(label_expr(lf.collect_schema().names(), as_trained="none")).collect()


def ntk_final(
    frame: pl.DataFrame,
    metric: str,
    *,
    group: str = "total",
    method: str = "none",
    probe: Literal["train", "all"] = "train",
    step: int | Literal["last", "all"] = "last",
) -> pl.DataFrame:
    """One NTK metric at one step per trial (and probe length): long rows of ``ntk_table``.

    ``probe="train"`` keeps ``probe_length == train.length`` (the train kernel; the shortest
    probe length when a trial has no such row), ``"all"`` every probe length; ``step="last"``
    takes each trial's last step, ``"all"`` every step.
    """
    check_columns(frame, ["trial_id", "step", "metric", "value", "group", "method"], "ntk")
    rows = frame.filter(
        (pl.col("metric") == metric) & (pl.col("group") == group) & (pl.col("method") == method)
    )
    if rows.is_empty():
        have = sorted(frame.get_column("metric").unique().drop_nulls().to_list())
        raise QueryError(
            f"no ntk rows for metric {metric!r}, group {group!r}, method {method!r}; "
            f"metrics present: {', '.join(have) or '(none)'}"
        )
    if probe == "train":
        if "train.length" in rows.columns:
            is_train = pl.col("probe_length") == pl.col("train.length")
        else:
            is_train = pl.lit(False)
        shortest = pl.col("probe_length") == pl.col("probe_length").min().over("trial_id")
        has_train = is_train.any().over("trial_id")
        rows = rows.filter(pl.when(has_train).then(is_train).otherwise(shortest))
    if step == "last":
        rows = rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))
    elif step != "all":
        rows = rows.filter(pl.col("step") == step)
    return rows


def varying_columns(frame: pl.DataFrame, candidates: Iterable[str] | None = None) -> list[str]:
    """Columns (of ``candidates``, default all) holding more than one distinct value."""
    names = list(frame.columns if candidates is None else candidates)
    out = []
    for name in names:
        if name not in frame.columns:
            continue
        col = frame.get_column(name)
        try:
            n = col.n_unique()
        except pl.exceptions.PolarsError:
            n = col.cast(pl.String, strict=False).n_unique()
        if n > 1:
            out.append(name)
    return out


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


def extrapolation_summary(
    source: Source | pl.DataFrame, *, threshold: float = 0.9, metric: str = "accuracy"
) -> pl.DataFrame:
    """One row per trial x (method, factor, finetune_steps): how far it extrapolates.

    ``reference`` = ``metric`` at ``train.length`` (same method/factor/fine-tuning);
    ``longest_length`` = the longest evaluated length L >= train.length such that every
    evaluated length in [train.length, L] keeps ``metric >= threshold * reference`` (for
    loss / perplexity: ``<= reference / threshold``); null without a reference. Then
    ``longest_ratio = longest_length / train.length`` and ``loss_ratio_{k}x`` = loss at
    k x train.length / loss at train.length for every evaluated k > 1. Config columns follow.
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
    head = [*keys, "label", "train.length", "reference", "longest_length", "longest_ratio"]
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
        out.select([*head, *ratios])
        .join(config_rows, on="trial_id", how="left")
        .sort(keys, nulls_last=True)
    )


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


_SQL_HINT = (
    "write a SQL condition, quote column names that contain dots with double quotes and "
    "strings with single quotes, e.g. '\"model.width\" = 64 AND method = 'yarn''"
)


def filter_where(frame: pl.DataFrame, where: str) -> pl.DataFrame:
    """Rows of ``frame`` matching the SQL condition ``where`` (parsed by ``pl.sql_expr``).

    Only an expression is parsed (no statements, no Python ``eval``); unknown columns and
    syntax errors raise QueryError with the available columns.
    """
    try:
        expr = pl.sql_expr(where)
    except pl.exceptions.ColumnNotFoundError as e:
        raise QueryError(
            f"cannot parse --where {where!r}: {_first_line(e)}; {_SQL_HINT}; "
            f"available columns: {', '.join(frame.columns)}"
        ) from None
    except (pl.exceptions.PolarsError, ValueError, TypeError) as e:
        raise QueryError(f"cannot parse --where {where!r}: {_first_line(e)}; {_SQL_HINT}") from None
    if isinstance(expr, list):  # pragma: no cover - sql_expr(str) returns one Expr
        raise QueryError(f"--where must be one condition, got {where!r}")
    unknown = [n for n in dict.fromkeys(expr.meta.root_names()) if n not in frame.columns]
    if unknown:
        dotted = [c for c in frame.columns if any(c.startswith(f"{n}.") for n in unknown)]
        hint = f"; {_SQL_HINT}" if dotted else ""
        raise QueryError(
            f"unknown column(s) {', '.join(map(repr, unknown))} in --where {where!r}{hint}; "
            f"available columns: {', '.join(frame.columns)}"
        )
    try:
        return frame.filter(expr)
    except pl.exceptions.PolarsError as e:
        raise QueryError(f"cannot evaluate --where {where!r}: {_first_line(e)}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

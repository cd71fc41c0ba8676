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

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import polars as pl

from rope_lab.analysis.curve_labels import (
    FACTOR_FIELD,
    KIND,
    SCALING_FIELD,
    corpus_expr,
    label_expr,
    own_field,
    trained_expr,
    trained_with_scaling,
)
from rope_lab.results import Results, RunDirError, load
from rope_lab.results.columns import TASK_METRIC_COLUMN

if TYPE_CHECKING:
    from rope_lab.analysis.summaries import aggregate_seeds, extrapolation_summary

__all__ = [
    "BITS_PER_BYTE",
    "FACTOR_FIELD",
    "KIND",
    "LM_METRICS",
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
    "has_bits_per_byte",
    "label_expr",
    "loss_metric",
    "ntk_final",
    "ntk_table",
    "own_field",
    "results_of",
    "task_metrics",
    "trained_expr",
    "trained_with_scaling",
    "varying_columns",
    "whole_tables",
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
        "bits_per_byte",
        "value",
        "grad_norm",
        "lr",
        "tokens_per_s",
    }
)
LOWER_IS_BETTER: Final = frozenset({"loss", "perplexity", "error_rate", "bits_per_byte"})
# What a language-model task (every position scored, no single right answer) is read by: bits
# per byte where its rows have them (text: byte-level and BPE models on one scale), else its
# loss in nats per token (a synthetic LM's tokens stand for no bytes; runs written before bits
# per byte existed).
BITS_PER_BYTE: Final = "bits_per_byte"
LM_METRICS: Final = frozenset({"loss", BITS_PER_BYTE})


class QueryError(ValueError):
    """A query that cannot be answered (unknown column, bad expression, no data)."""


def default_metric(task: str | None) -> str:
    """The eval metric a task's results are read by when none is asked for: its registered
    params class's ``default_metric`` ("bits_per_byte" for the text language models, "loss"
    for the synthetic one, "accuracy" for the synthetic tasks: passkey, copy, ...); "accuracy"
    for no task or an unknown name. What a frame's rows are read by: :func:`task_metrics`."""
    if task is None:
        return "accuracy"
    from rope_lab.registry import TASKS

    if task not in TASKS:
        return "accuracy"
    return str(TASKS[task].default_metric)


def has_bits_per_byte(frame: pl.DataFrame) -> bool:
    """Whether every row of ``frame`` (at least one) has ``bits_per_byte`` (null: its task's
    tokens stand for no bytes, or the run predates the column; NaN, a diverged model, counts
    as having one)."""
    if frame.is_empty() or BITS_PER_BYTE not in frame.columns:
        return False
    return bool(frame.select(pl.col(BITS_PER_BYTE).is_not_null().all()).item())


def loss_metric(frame: pl.DataFrame) -> str:
    """The loss a figure of ``frame``'s rows reads: ``bits_per_byte`` when every row has one
    (text language models only), else ``loss`` (nats per scored token)."""
    return BITS_PER_BYTE if has_bits_per_byte(frame) else "loss"


def task_metrics(frame: pl.DataFrame) -> dict[str | None, str]:
    """What each ``task.name`` in ``frame`` is read by (``{None: "accuracy"}`` without that
    column), in task-name order: its ``default_metric`` (written with the trial, else from the
    registry), and for a language-model task (``loss`` or ``bits_per_byte``) bits per byte
    when every row of the task has one, else loss (:func:`loss_metric`)."""
    if "task.name" not in frame.columns:
        return {None: "accuracy"}
    tasks = frame.get_column("task.name").unique().to_list()
    written: dict[str | None, str] = {}
    if TASK_METRIC_COLUMN in frame.columns:  # written with the trial (no registry import)
        pairs = frame.select("task.name", TASK_METRIC_COLUMN).drop_nulls().unique()
        written = dict(pairs.iter_rows())
    ordered = sorted(tasks, key=lambda t: (t is None, str(t)))
    out = {}
    for t in ordered:
        metric = written[t] if t in written else default_metric(t)
        if metric in LM_METRICS:
            metric = loss_metric(frame.filter(pl.col("task.name").eq_missing(t)))
        out[t] = metric
    return out


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


EVAL_MODES: Final = ("teacher_forced", "decode", "attention", "all")


def eval_table(
    source: Source,
    *,
    whole_sequence: bool = True,
    mode: str = "teacher_forced",
    depths: bool | None = False,
) -> pl.DataFrame:
    """Eval rows joined with their trial config, plus ``length_ratio``, ``label`` and
    ``corpus`` (a text task's corpus, `curve_labels.corpus_expr`; null for other tasks).

    ``length_ratio = length / train.length``; ``whole_sequence=False`` keeps the per-position-
    bucket rows too (``position_bucket`` = bucket start, null for the whole sequence).
    ``mode``: the teacher-forced rows (``mode`` null; what every figure and claim reads), the
    rows of answers generated with a cache (``"decode"``, with their ``protocol``), the
    attention statistics per layer (``"attention"``: `rope_lab.trial.attention_rows`), or
    ``"all"``.
    ``depths``: False, the rows of the task as sampled (``depth`` null: what every figure and
    claim reads); True, only the rows at a set needle depth (``eval.depths``; a length x depth
    table is ``pivot(on="depth", index="length", values="accuracy")``); None, both.
    """
    if mode not in EVAL_MODES:
        raise QueryError(f"unknown eval mode {mode!r}; allowed: {', '.join(EVAL_MODES)}")
    res = results_of(source)
    lf = res.eval_with_config
    if whole_sequence:
        lf = lf.filter(pl.col("position_bucket").is_null())
    if depths is not None:
        at_depth = pl.col("depth").is_not_null()
        lf = lf.filter(at_depth if depths else ~at_depth)
    if mode != "all":
        lf = lf.filter(pl.col("mode").fill_null("teacher_forced") == mode)
    columns = lf.collect_schema().names()
    extra = [label_expr(columns), corpus_expr(columns)]
    if "train.length" in columns:
        extra.append((pl.col("length") / pl.col("train.length")).alias("length_ratio"))
    return lf.with_columns(extra).collect()


def ntk_table(source: Source, *, kernel: str | None = "ntk") -> pl.DataFrame:
    """NTK rows (long format) joined with their trial config, plus ``label``: the rows of
    ``kernel`` ("ntk", the empirical NTK; "nngp", the NNGP at initialisation; None: both)."""
    lf = results_of(source).with_config("ntk")
    if kernel is not None:
        lf = lf.filter(pl.col("kernel") == kernel)
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


def __getattr__(name: str):
    """`aggregate_seeds` and `extrapolation_summary` from `rope_lab.analysis.summaries`, which
    builds on this module (imported on first use: no import cycle)."""
    if name in ("aggregate_seeds", "extrapolation_summary"):
        from rope_lab.analysis import summaries

        return getattr(summaries, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def whole_tables(width: int, strings: int) -> pl.Config:
    """polars' printing settings (a context manager) for tables shown whole: every row and
    column, `width` characters wide, strings up to `strings` characters, no dtypes or shape."""
    return pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=width,
        fmt_str_lengths=strings,
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
    )

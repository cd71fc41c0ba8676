"""The rows a figure draws: eval and NTK frames of a source, automatic facets, finite values,
seed counts and the warning when a plotted point averages over a varying config column."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import polars as pl

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.curves import LABEL_COLUMNS, with_labels
from rope_lab.analysis.query import QueryError

COL_AUTO: Final = ("model.width",)
ROW_AUTO: Final = ("train.length", "task.name", "model.parametrization", "model.depth")


Source = q.Source | pl.DataFrame


def eval_frame(source: Source, *, whole_sequence: bool = True) -> pl.DataFrame:
    """Eval rows of ``source`` with ``error_rate``, ``label`` and the label columns
    (:func:`~rope_lab.analysis.plots.curves.label_columns`): whole-sequence rows only unless
    ``whole_sequence`` is False; QueryError when there are none."""
    if isinstance(source, pl.DataFrame):
        frame = source
        if whole_sequence and "position_bucket" in frame.columns:
            frame = frame.filter(pl.col("position_bucket").is_null())
    else:
        frame = q.eval_table(source, whole_sequence=whole_sequence)
    if frame.is_empty():
        raise QueryError("no eval rows in these run directories")
    if "accuracy" in frame.columns and "error_rate" not in frame.columns:
        frame = frame.with_columns((1.0 - pl.col("accuracy")).alias("error_rate"))
    return with_labels(frame)


def ntk_frame(source: Source) -> pl.DataFrame:
    """NTK rows of ``source`` with ``label`` and the label columns (the kernel as trained is
    method ``"none"``); QueryError when there are none."""
    frame = source if isinstance(source, pl.DataFrame) else q.ntk_table(source)
    if frame.is_empty():
        raise QueryError(
            "no ntk rows in these run directories (the ntk table is written by NTK tracking)"
        )
    return with_labels(frame, as_trained="none")


def auto_facet(frame: pl.DataFrame, value: str | None, candidates: Sequence[str]) -> str | None:
    """``value``, or for ``"auto"`` the first of ``candidates`` that varies (else None)."""
    if value != "auto":
        return value
    varying = q.varying_columns(frame, candidates)
    return varying[0] if varying else None


def fit_groups(frame: pl.DataFrame) -> tuple[str, ...]:
    """The columns whose groups a law or isoFLOP figure fits one by one: task, corpus (only
    when some row reads one: null for synthetic tasks) and curve label."""
    return tuple(
        c
        for c in ("task.name", "corpus", "label")
        if c in frame.columns and frame.get_column(c).drop_nulls().len() > 0
    )


def finite_rows(frame: pl.DataFrame, col: str) -> pl.DataFrame:
    """The rows whose ``col`` is a finite number."""
    value = pl.col(col).cast(pl.Float64)
    return frame.filter(value.is_not_null() & value.is_finite())


def warn_if_mixed(frame: pl.DataFrame, keys: Sequence[str | None]) -> None:
    """Warn when a plotted cell averages over a varying config column other than the seed."""
    keys = [k for k in dict.fromkeys(keys) if k]
    if "train.seed" in frame.columns:
        counts = frame.group_by([*keys, "train.seed"]).len()
        if counts.get_column("len").max() in (None, 0, 1):
            return
    skip = set(keys) | q.RUN_COLUMNS | q.MEASUREMENT_COLUMNS | {"label", "method", "factor"}
    skip |= set(LABEL_COLUMNS)
    mixed = []
    for c in frame.columns:
        if c in skip or c.startswith("eval.") or frame.schema[c] == pl.List:
            continue
        if "trial_id" in frame.columns and c in ("step", "probe_length", "group", "metric"):
            continue
        try:
            n = frame.group_by(keys).agg(pl.col(c).n_unique()).get_column(c).max()
        except pl.exceptions.PolarsError:
            continue
        if isinstance(n, int) and n > 1:
            mixed.append(c)
    if mixed:
        warnings.warn(
            f"each plotted point averages over different values of {', '.join(mixed)}; facet "
            "them (col=/row=) or filter them out",
            stacklevel=3,
        )


def n_seeds(frame: pl.DataFrame, keys: Sequence[str | None]) -> int:
    """Most seeds behind one plotted point keyed by ``keys``: distinct ``train.seed`` values
    (trials that differ in another config column are not seeds; `warn_if_mixed` names them),
    or distinct trials without a seed column."""
    keys = [k for k in dict.fromkeys(keys) if k]
    if "trial_id" not in frame.columns or frame.is_empty():
        return 1
    by = "train.seed" if "train.seed" in frame.columns else "trial_id"
    counts = frame.group_by(keys).agg(pl.col(by).n_unique()).get_column(by)
    return int(counts.to_numpy().max())


def command_rows(source: object, command: str, needed: Sequence[str]) -> pl.DataFrame:
    """The rows `rope-lab COMMAND --output` wrote: ``source`` is a frame, or the path of the
    Parquet file, alone or in a one-item list. QueryError naming the file when it is not one,
    or the first column of ``needed`` the rows lack."""
    if isinstance(source, list | tuple):
        if len(source) != 1:
            raise QueryError(f"{command} plots one Parquet file written by rope-lab {command}")
        source = source[0]
    if isinstance(source, pl.DataFrame):
        frame = source
    else:
        path = Path(str(source))
        if not path.is_file():
            raise QueryError(f"{path}: not a file; give the Parquet file of rope-lab {command}")
        try:
            frame = pl.read_parquet(path)
        except Exception as err:
            raise QueryError(f"{path}: not a Parquet file ({type(err).__name__})") from None
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise QueryError(f"{command} rows lack column {absent[0]!r}; rerun rope-lab {command}")
    return frame

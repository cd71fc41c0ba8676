"""Which result rows may share one fit: a loss law, a ratio law or an isoFLOP profile pools
trials of one task on one corpus only (`check_one_scale`), refused with the group and the
counts otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from rope_lab.analysis.curve_labels import CORPUS, DATA_PATH, TASK_PARAMS
from rope_lab.analysis.query import QueryError

__all__ = ["check_one_scale"]


def _group_name(by: Sequence[str], key: tuple[Any, ...]) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(by, key, strict=True)) or "all rows"


def _counts(part: pl.DataFrame, col: Any) -> str:
    """``"a: 12 trials, b: 8 trials"``: trials per value of the expression ``col``."""
    counts = part.group_by(col.alias("_v")).agg(pl.col("trial_id").n_unique().alias("k"))
    pairs = sorted(counts.iter_rows(), key=lambda p: str(p[0]))
    return ", ".join(f"{v}: {k} trials" for v, k in pairs)


def check_one_scale(frame: pl.DataFrame, y: str, by: Sequence[str], what: str) -> None:
    """QueryError naming the fit (``what``), the group and the counts when a group of ``by``
    pools trials of different ``task.name`` or of different corpora (`corpus`: two corpora
    are two tasks, whatever the metric: a byte-level and a BPE model of one text differ in
    loss level and in what a training token is, so even in bits per byte they are not one
    curve)."""
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): frame}
    for key, part in parts.items():
        name = _group_name(by, key)
        if "task.name" in part.columns and part.get_column("task.name").n_unique() > 1:
            tasks = part.get_column("task.name").n_unique()
            raise QueryError(
                f"{what}: group {name} pools {tasks} tasks "
                f"({_counts(part, pl.col('task.name'))}); add task.name to --by"
            )
        if TASK_PARAMS in part.columns:
            corpora = part.select(DATA_PATH.alias("p")).get_column("p").drop_nulls().n_unique()
            if corpora > 1:
                raise QueryError(
                    f"{what}: group {name} pools {corpora} corpora in {y} "
                    f"({_counts(part.filter(DATA_PATH.is_not_null()), DATA_PATH)}); "
                    f"add {CORPUS} to --by"
                )

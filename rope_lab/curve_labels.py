"""Curve labels of result rows, as polars expressions: the PE kind for an encoding as trained,
``"rope (linear x2)"`` for RoPE trained with a scaling, ``"rope/yarn x4"`` for a scaling applied
at evaluation, plus ``" +ft100"`` after 100 fine-tuning steps.

Rows carry the flattened trial config; only encodings with RoPE fields have
``model.position.rope.*`` columns (null elsewhere), so no kind name is tested here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import polars as pl

KIND: Final = "model.position.kind"
SCALING: Final = "model.position.rope.scaling"
TRAIN_FACTOR: Final = "model.position.rope.factor"


def _factor_str(col: str) -> pl.Expr:
    """``2.0`` -> ``"2"``, ``1.5`` -> ``"1.5"`` (like ``f"{x:g}"`` for typical factors)."""
    f = pl.col(col)
    return (
        pl.when(f.is_null())
        .then(pl.lit("?"))
        .when(f == f.round(0))
        .then(f.cast(pl.Int64, strict=False).cast(pl.String))
        .otherwise(f.round(4).cast(pl.String))
    )


def trained_expr(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Whether a row is its PE as trained rather than a RoPE scaling applied at evaluation.

    ``method == as_trained`` (the NTK table's ``"none"``), or, when ``as_trained`` is None,
    method ``"none"`` or method and factor equal to the trained RoPE scaling (eval table).
    """
    method = pl.col("method").fill_null("none")
    if as_trained is not None:
        return method == as_trained
    if SCALING not in columns:
        return method == "none"
    same_factor = pl.lit(True)
    if TRAIN_FACTOR in columns:
        same_factor = pl.col("factor").is_null() | (pl.col("factor") == pl.col(TRAIN_FACTOR))
    return (method == "none") | ((method == pl.col(SCALING).fill_null("default")) & same_factor)


def trained_with_scaling(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Whether a row's RoPE was trained with a scaling, which its label as trained names
    (``"rope (linear x2)"``; eval tables, ``as_trained`` None, only)."""
    if as_trained is not None or KIND not in columns or SCALING not in columns:
        return pl.lit(False)
    return pl.col(SCALING).fill_null("default") != "default"  # null: no RoPE fields


def label_expr(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Curve label: ``"alibi"``, ``"rope"``, ``"rope/yarn x4"``, ``"rope/ntk x2 +ft100"``.

    Rows of the PE as trained (:func:`trained_expr`) read the PE kind; RoPE trained with a
    scaling reads ``"rope (linear x2)"``.
    """
    method = pl.col("method").fill_null("none")
    trained = trained_expr(columns, as_trained=as_trained)
    scaled = pl.concat_str([method, pl.lit(" x"), _factor_str("factor")])
    if KIND in columns:
        kind = pl.col(KIND).fill_null("?")
        base = kind
        if SCALING in columns and as_trained is None:
            name = [pl.col(SCALING).fill_null("default")]
            if TRAIN_FACTOR in columns:
                name += [pl.lit(" x"), _factor_str(TRAIN_FACTOR)]
            with_name = pl.concat_str([kind, pl.lit(" ("), *name, pl.lit(")")])
            base = pl.when(trained_with_scaling(columns)).then(with_name).otherwise(kind)
        label = pl.when(trained).then(base).otherwise(pl.concat_str([kind, pl.lit("/"), scaled]))
    else:
        label = pl.when(trained).then(method).otherwise(scaled)
    if "finetune_steps" in columns:
        ft = pl.col("finetune_steps")
        label = (
            pl.when(ft.fill_null(0) > 0)
            .then(pl.concat_str([label, pl.lit(" +ft"), ft.cast(pl.String)]))
            .otherwise(label)
        )
    return label.alias("label")

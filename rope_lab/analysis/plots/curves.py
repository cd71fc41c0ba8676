"""The curves of the figures, one per PE kind / scaling: the label columns a figure's
frame carries next to its ``label`` text, and the typed :class:`Curve` read from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import polars as pl

from rope_lab.analysis import query as q
from rope_lab.results.columns import FAMILY_LABEL_COLUMN
from rope_lab.trial.scaling_plan import TEMPERATURE

LABEL_COLUMNS: Final = ("label_kind", "label_method", "label_factor", "label_finetune")


def label_columns(columns: Sequence[str], *, as_trained: str | None = None) -> list[pl.Expr]:
    """What each row's ``label`` is made of, as the columns of :data:`LABEL_COLUMNS`.

    ``label_kind``: PE kind (String; null without a ``model.position.kind`` column), or a model
    family's own label (``family.label``: ``"CNN k3 d1,2,4"``, which has no PE);
    ``label_method``: scaling method applied at evaluation (String: a RoPE method or
    ``"temperature"``; null for the PE as trained, see
    :func:`~rope_lab.analysis.query.trained_expr`);
    ``label_factor``: its factor, or for RoPE trained with a scaling the trained factor its
    label names (Float64, else null);
    ``label_finetune``: fine-tuning steps (Int64, 0 for none).
    """
    kind = pl.col(q.KIND).fill_null("?") if q.KIND in columns else pl.lit(None, pl.String)
    if FAMILY_LABEL_COLUMN in columns:
        own = pl.col(FAMILY_LABEL_COLUMN).fill_null("")
        kind = pl.when(own != "").then(own).otherwise(kind)
    finetune = pl.col("finetune_steps").fill_null(0) if "finetune_steps" in columns else pl.lit(0)
    method, factor = pl.lit(None, pl.String), pl.lit(None, pl.Float64)
    if "method" in columns:
        scaled = ~q.trained_expr(columns, as_trained=as_trained)
        method = pl.when(scaled).then(pl.col("method").fill_null("none"))
        trained_factor = pl.lit(None, pl.Float64)
        own_factor = q.own_field(columns, q.FACTOR_FIELD)
        if own_factor is not None:
            named = q.trained_with_scaling(columns, as_trained=as_trained)
            trained_factor = pl.when(named).then(own_factor)
        factor = pl.when(scaled).then(pl.col("factor")).otherwise(trained_factor)
    return [
        kind.alias("label_kind"),
        method.alias("label_method"),
        factor.cast(pl.Float64).alias("label_factor"),
        finetune.cast(pl.Int64).alias("label_finetune"),
    ]


def with_labels(frame: pl.DataFrame, *, as_trained: str | None = None) -> pl.DataFrame:
    """``frame`` with ``label`` (when missing: :func:`~rope_lab.analysis.query.label_expr`, or
    the PE kind without a ``method`` column) and the :data:`LABEL_COLUMNS` of its rows."""
    if "label" not in frame.columns:
        label = (
            q.label_expr(frame.columns, as_trained=as_trained)
            if "method" in frame.columns
            else pl.col(q.KIND).alias("label")
        )
        frame = frame.with_columns(label)
    return frame.with_columns(label_columns(frame.columns, as_trained=as_trained))


class Curve(NamedTuple):
    """One curve: its legend text and the label columns it was made from."""

    label: str
    kind: str | None = None
    method: str | None = None
    factor: float | None = None
    finetune: int = 0

    @property
    def scaled(self) -> bool:
        """A scaling applied at evaluation: a RoPE method (drawn dashed) or the log-length
        temperature (dotted)."""
        return self.method is not None

    @property
    def temperature(self) -> bool:
        """The zero-shot log-length attention temperature (any PE kind)."""
        return self.method == TEMPERATURE

    @property
    def family(self) -> str:
        """What its hue follows: the PE kind (``"rope"``) or kind and scaling (``"rope/yarn"``)."""
        if self.kind is not None and self.method is not None:
            return f"{self.kind}/{self.method}"
        return self.kind or self.method or self.label


def curves(frame: pl.DataFrame) -> dict[str, Curve]:
    """The :class:`Curve` of each ``label`` of ``frame``, from its label columns (derived from
    the config columns when missing)."""
    if not set(LABEL_COLUMNS) <= set(frame.columns):
        frame = with_labels(frame)
    rows = frame.select("label", *LABEL_COLUMNS).unique(subset="label", maintain_order=True)
    return {r[0]: Curve(*r) for r in rows.drop_nulls("label").iter_rows()}

"""Extrapolation curves (facets, lines, log2 length axes, L_train marker) and loss by position."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from rope_lab.analysis import query as q
from tests.analysis.plots.synthetic import (
    KINDS,
    L_TRAIN,
    N_BUCKETS,
    N_LABELS,
    SCALINGS,
    WIDTHS,
    dashed_vlines,
    data_axes,
)


def test_extrapolation_facets_lines_and_axes(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["extrapolation"][0]
    axes = data_axes(fig)
    assert len(axes) == len(WIDTHS)  # auto facets: one column per width
    assert [ax.get_title() for ax in axes] == ["width 32", "width 64"]
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert ax.xaxis.get_transform().base == 2
        vlines = dashed_vlines(ax)
        assert len(vlines) == 1 and vlines[0].get_xdata()[0] == L_TRAIN
        # one data line per label, plus the L_train marker
        assert len(ax.lines) == N_LABELS + 1
        # two seeds: the spread is shaded
        assert len(ax.collections) >= N_LABELS
    assert axes[0].get_xlabel() == "evaluation length (tokens)"
    assert axes[0].get_ylabel() == "accuracy"
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts[:4] == ["none", "learned", "alibi", "rope"]
    assert "rope/yarn x4" in legend_texts
    assert "2 seeds" in fig.get_suptitle()


def test_extrapolation_rows_cols_and_ratio_axis(store: Path) -> None:
    fig = plots.extrapolation(
        store, metric="loss", x="length_ratio", col="model.position.kind", row="model.width"
    )
    axes = data_axes(fig)
    assert len(axes) == len(KINDS) * len(WIDTHS)
    rope_ax = next(ax for ax in axes if ax.get_title() == "width 32, PE rope")
    assert len(rope_ax.lines) == 1 + len(SCALINGS) + 1
    alibi_ax = next(ax for ax in axes if ax.get_title() == "width 64, PE alibi")
    assert len(alibi_ax.lines) == 2
    assert dashed_vlines(alibi_ax)[0].get_xdata()[0] == 1.0
    assert axes[-1].get_xlabel() == "evaluation length / L_train"
    assert axes[0].get_ylabel() == "loss (nats / scored token)"


def test_extrapolation_warns_when_averaging_over_config(store: Path) -> None:
    with pytest.warns(UserWarning, match=r"model\.width"):
        plots.extrapolation(store, col=None, row=None)


def test_positions(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["positions"][0]
    axes = data_axes(fig)
    assert len(axes) == len(WIDTHS)
    for ax in axes:
        assert ax.get_xscale() == "linear"
        assert len(ax.lines) == N_LABELS + 1
        assert ax.get_xlim() == (0.0, 128.0)
        line = ax.lines[0]
        assert len(line.get_xdata()) == N_BUCKETS - 1  # the NaN bucket is left out
    assert "bucket" in axes[0].get_xlabel()
    assert axes[0].get_ylabel().startswith("loss")
    assert "length 128" in fig.get_suptitle()
    assert "have no scored targets" in fig.get_suptitle()


def _as_task(store: Path, task: str) -> pl.DataFrame:
    """The synthetic store's whole-sequence eval rows of width 64, seed 0, as trials of ``task``."""
    frame = q.eval_table(store).filter(pl.col("model.width") == 64, pl.col("train.seed") == 0)
    return frame.with_columns(
        pl.lit(task).alias("task.name"), (pl.col("trial_id") + f"-{task}").alias("trial_id")
    )


def _curve(ax, label_index: int = 0) -> list[float]:
    return [float(y) for y in ax.lines[label_index].get_ydata()]


def test_extrapolation_reads_language_model_tasks_by_loss(store: Path) -> None:
    lm = _as_task(store, "lm_text")
    fig = plots.extrapolation(lm)
    (ax,) = data_axes(fig)
    assert ax.get_ylabel() == "loss (nats / scored token)"
    none = lm.filter(pl.col("label") == "none").sort("length")
    assert _curve(ax) == pytest.approx(none["loss"].to_list())
    # an explicit metric still wins
    (ax,) = data_axes(plots.extrapolation(lm, metric="accuracy"))
    assert ax.get_ylabel() == "accuracy"
    assert _curve(ax) == pytest.approx(none["accuracy"].to_list())


def _with_bits_per_byte(frame: pl.DataFrame, bytes_per_token: float) -> pl.DataFrame:
    """Rows of a text model whose tokens stand for ``bytes_per_token`` bytes each: bits per
    byte = loss / bytes_per_token / ln 2."""
    bpb = pl.col("loss") / bytes_per_token / math.log(2)
    return frame.with_columns(bpb.alias("bits_per_byte"))


def test_extrapolation_reads_text_models_by_bits_per_byte(store: Path) -> None:
    """Text rows with bits per byte are drawn in it by default: at 4 bytes a token each point
    is the loss x 0.360674 (1 / (4 ln 2)); rows without it are drawn by loss."""
    lm = _with_bits_per_byte(_as_task(store, "lm_tokens"), 4.0)
    (ax,) = data_axes(plots.extrapolation(lm))
    assert ax.get_ylabel() == "bits per byte (scored text)"
    none = lm.filter(pl.col("label") == "none").sort("length")
    assert _curve(ax) == pytest.approx([v * 0.3606737602 for v in none["loss"].to_list()])
    first = none.row(0, named=True)  # width 64, seed 0, length 16: accuracy 0.94, no decay
    assert first["loss"] == pytest.approx(-math.log(0.94) + 0.05)
    assert _curve(ax)[0] == pytest.approx((-math.log(0.94) + 0.05) / (4 * math.log(2)))
    (ax,) = data_axes(plots.extrapolation(lm, metric="loss"))
    assert _curve(ax) == pytest.approx(none["loss"].to_list())
    older = lm.with_columns(pl.lit(None, pl.Float64).alias("bits_per_byte"))
    (ax,) = data_axes(plots.extrapolation(older))
    assert ax.get_ylabel() == "loss (nats / scored token)"


def test_positions_read_text_models_by_bits_per_byte(store: Path) -> None:
    buckets = q.eval_table(store, whole_sequence=False).filter(
        pl.col("model.width") == 64, pl.col("train.seed") == 0, pl.col("label") == "none"
    )
    lm = _with_bits_per_byte(buckets.with_columns(pl.lit("lm_tokens").alias("task.name")), 2.0)
    (ax,) = data_axes(plots.positions(lm))
    assert ax.get_ylabel() == "bits per byte (scored text)"
    rows = lm.filter(pl.col("length") == 128, pl.col("position_bucket").is_not_null())
    expected = [v / (2 * math.log(2)) for v in rows.sort("position_bucket")["loss"].to_list()]
    assert _curve(ax) == pytest.approx([v for v in expected if math.isfinite(v)])


def test_extrapolation_of_mixed_tasks_gives_each_task_its_metric(store: Path) -> None:
    mixed = pl.concat([_as_task(store, "passkey"), _as_task(store, "lm_synthetic")])
    fig = plots.extrapolation(mixed)
    axes = data_axes(fig)
    assert [ax.get_title() for ax in axes] == ["task lm_synthetic", "task passkey"]
    assert [ax.get_ylabel() for ax in axes] == ["loss (nats / scored token)", "accuracy"]
    none = mixed.filter(pl.col("label") == "none").sort("length")
    lm_rows = none.filter(pl.col("task.name") == "lm_synthetic")
    pk_rows = none.filter(pl.col("task.name") == "passkey")
    assert _curve(axes[0]) == pytest.approx(lm_rows["loss"].to_list())
    assert _curve(axes[1]) == pytest.approx(pk_rows["accuracy"].to_list())
    assert "loss" in fig.get_suptitle() and "accuracy" in fig.get_suptitle()


def test_extrapolation_of_mixed_tasks_facets_by_task(store: Path) -> None:
    mixed = pl.concat([_as_task(store, "passkey"), _as_task(store, "lm_text")])
    axes = data_axes(plots.extrapolation(mixed, row="model.depth", col="auto"))
    assert [ax.get_title() for ax in axes] == ["depth 2, task lm_text", "depth 2, task passkey"]
    with pytest.raises(q.QueryError, match=r"facet them by task\.name"):
        plots.extrapolation(mixed, row="model.depth", col="model.width")

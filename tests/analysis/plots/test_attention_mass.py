"""The attention_mass plot: one panel per layer (a row per width), each line the seed mean of a
statistic of the per-layer rows (head null) against length / L_train."""

from __future__ import annotations

import numpy as np
import polars as pl

from rope_lab.analysis import query as q
from tests.analysis.plots.synthetic import L_TRAIN, data_axes, png_ok


def test_one_panel_per_layer_drawing_the_layer_rows(rendered, store):
    fig, path = rendered["attention_mass"]
    png_ok(path)
    axes = {ax.get_title(): ax for ax in data_axes(fig)}
    assert list(axes) == [f"width {w}, layer {n}" for w in (32, 64) for n in (0, 1)]
    rows = q.eval_table(store, mode="attention").filter(pl.col("head").is_null())
    assert q.eval_table(store).filter(pl.col("layer").is_not_null()).is_empty()
    for layer in (0, 1):
        ax = axes[f"width 64, layer {layer}"]
        mine = rows.filter(pl.col("layer") == layer, pl.col("model.width") == 64)
        means = mine.group_by("length").agg(pl.col("first_token_mass").mean()).sort("length")
        lines = [line for line in ax.get_lines() if len(line.get_xdata()) == means.height]
        expected = means["first_token_mass"].to_numpy()
        assert any(
            np.allclose(line.get_xdata(), means["length"].to_numpy() / L_TRAIN)
            and np.allclose(line.get_ydata(), expected)
            for line in lines
        ), (layer, [line.get_ydata() for line in lines], expected)

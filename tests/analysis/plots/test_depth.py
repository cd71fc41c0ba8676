"""The depth plot: a length x depth heatmap per curve, its cells the seed means of the rows at
each needle depth."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rope_lab.analysis import query as q
from rope_lab.analysis.query import QueryError
from tests.analysis.plots.synthetic import (
    DEPTHS,
    LENGTHS,
    SCALINGS,
    SEEDS,
    WIDTHS,
    _accuracy,
    depth_accuracy,
    png_ok,
)


def test_cells_are_seed_means_by_length_and_depth(rendered, store):
    """One panel per rope curve (as trained and 4 scalings) and width row; each cell the mean
    over the 2 seeds of the synthetic accuracy, computed here from its formula; the dashed
    lines edge L_train's column."""
    fig, path = rendered["depth"]
    png_ok(path)
    panels = [ax for ax in fig.axes if ax.collections and ax.get_title()]
    assert len(panels) == len(WIDTHS) * (1 + len(SCALINGS))
    by_title = {ax.get_title(): ax for ax in panels}
    for width in WIDTHS:
        for method, factor, label in [("default", 1.0, "rope"), ("yarn", 4.0, "rope/yarn x4")]:
            ax = by_title[f"width {width}, {label}"]
            shown = np.asarray(ax.collections[0].get_array()).reshape(len(DEPTHS), len(LENGTHS))
            expected = [
                [
                    np.mean(
                        [
                            depth_accuracy(_accuracy("rope", method, factor, n, width, s), d, n)
                            for s in SEEDS
                        ]
                    )
                    for n in LENGTHS
                ]
                for d in DEPTHS
            ]
            np.testing.assert_allclose(shown, expected, rtol=1e-12)
            assert [t.get_text() for t in ax.get_yticklabels()] == ["0%", "50%", "100%"]
            assert [t.get_text() for t in ax.get_xticklabels()] == [str(n) for n in LENGTHS]
            dashed = [line.get_xdata()[0] for line in ax.get_lines()]
            assert dashed == [1, 2]  # L_train = 32 is the second column


def test_depth_rows_stay_out_of_the_other_readers(store):
    """eval_table leaves the depth rows out unless asked, so no other figure or claim sees a
    length twice; depths=True gives the length x depth table with polars."""
    plain = q.eval_table(store)
    assert plain.get_column("depth").null_count() == plain.height
    at = q.eval_table(store, depths=True)
    assert at.height == len(WIDTHS) * len(SEEDS) * (1 + len(SCALINGS)) * len(LENGTHS) * 3
    table = (
        at.filter((pl.col("label") == "rope") & (pl.col("model.width") == 64))
        .group_by("length", "depth")
        .agg(pl.col("accuracy").mean())
        .sort("depth", "length")
        .pivot(on="depth", index="length", values="accuracy")
    )
    assert table.columns == ["length", "0.0", "0.5", "1.0"] and table.height == len(LENGTHS)
    # length 128 = 4 L_train, depth 0: rope's 0.94 + 0.005 - 0.25 x 2 minus 0.3 x 2 / 2 of it
    expected = (0.94 + 0.005 - 0.5) * (1 - 0.3)
    assert table.filter(pl.col("length") == 128)["0.0"].item() == pytest.approx(expected)


def test_runs_without_depth_rows_are_refused(tmp_path):
    from rope_lab.analysis import plots
    from tests.analysis.plots.test_decode import make_decode_store

    with pytest.raises(QueryError, match="no rows at a set needle depth"):
        plots.plot("depth", make_decode_store(tmp_path))


def test_one_row_of_many_panels_wraps(store, tmp_path):
    """With one row of panels (a single width) and more curves than `wrap`, the panels wrap
    onto rows of `wrap`, in label order, each cell still the seed mean; spare axes are off."""
    from rope_lab.analysis.plots.depth import depth

    one_width = q.eval_table(store, depths=None).filter(pl.col("model.width") == WIDTHS[0])
    fig = depth(one_width, wrap=2, out=tmp_path / "wrapped.png")
    panels = [ax for ax in fig.axes if ax.collections and ax.get_title()]
    assert len(panels) == 1 + len(SCALINGS)
    rows = sorted({round(ax.get_position().y0, 3) for ax in panels}, reverse=True)
    assert len(rows) == -(-len(panels) // 2)
    spare = [ax for ax in fig.axes if not ax.axison]
    assert len(spare) == 2 * len(rows) - len(panels)
    ax = next(a for a in panels if a.get_title() == "rope")
    shown = np.asarray(ax.collections[0].get_array()).reshape(len(DEPTHS), len(LENGTHS))
    width = WIDTHS[0]
    expected = [
        [
            np.mean(
                [
                    depth_accuracy(_accuracy("rope", "default", 1.0, n, width, s), d, n)
                    for s in SEEDS
                ]
            )
            for n in LENGTHS
        ]
        for d in DEPTHS
    ]
    np.testing.assert_allclose(shown, expected, rtol=1e-12)

"""The lr-transfer figure draws the seed-mean losses and marks the optima of the analysis."""

from __future__ import annotations

import pytest

from rope_lab.analysis.lr_transfer import lr_transfer_tables
from rope_lab.analysis.plots import plot
from rope_lab.analysis.query import QueryError
from tests.analysis.plots.synthetic import lr_rows as sweep_rows
from tests.analysis.test_lr_transfer import LRS, WIDTHS


def test_each_panel_marks_the_optima_of_its_parametrisation() -> None:
    rows = sweep_rows({"mup": 0.0, "sp": -1.0}, seeds=2)
    fig = plot("lr-transfer", rows, length_ratio=4.0, n_boot=20)
    optima, _ = lr_transfer_tables(rows.filter(rows["length_ratio"] == 4.0), n_boot=20)
    axes = fig.axes[:2]
    assert [ax.get_title().split(":")[0] for ax in axes] == ["lm_text · mup", "lm_text · sp"]
    for ax, param in zip(axes, ("mup", "sp"), strict=True):
        curves = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert len(curves) == len(WIDTHS)
        assert list(curves[0].get_xdata()) == list(LRS)
        stars = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_marker() == "*")
        want = sorted(optima.filter(optima["model.parametrization"] == param)["lr_star"])
        assert stars == pytest.approx(want)
    assert "slope 0.00" in axes[0].get_title() and "slope -1.00" in axes[1].get_title()


def test_an_absent_ratio_is_named() -> None:
    message = r"no eval rows at length ratio 2; ratios are \[1.0, 4.0\]"
    with pytest.raises(QueryError, match=message):
        plot("lr-transfer", sweep_rows({"sp": 0.0}, seeds=1), length_ratio=2.0)

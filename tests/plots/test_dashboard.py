"""The one-page summary of a sweep."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from tests.plots.synthetic import data_axes


def test_summary_dashboard(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["summary"][0]
    axes = data_axes(fig)
    assert len(axes) == 9  # 6 eval panels + 3 ntk panels
    titles = [ax.get_title() for ax in axes]
    assert any(t.startswith("accuracy vs length") for t in titles)
    assert any(t.startswith("longest length keeping") for t in titles)
    assert any("drift" in t for t in titles)

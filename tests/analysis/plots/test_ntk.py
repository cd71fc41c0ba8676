"""NTK drift vs step with the fitted slopes vs width, cross-kernel alignment vs probe length."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from rope_lab.analysis import query as q
from rope_lab.results import trial_dir, write_trial_row
from tests.analysis.plots.synthetic import KINDS, WIDTHS, data_axes


def test_ntk_drift(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["ntk-drift"][0]
    axes = data_axes(fig)
    assert len(axes) == 4  # three metrics + end-of-training panel
    for ax, metric in zip(axes[:3], plots.DRIFT_METRICS, strict=True):
        assert ax.get_xscale() == "log"
        assert ax.get_xlabel() == "training step"
        assert ax.get_ylabel() == plots.name_of(metric)
        # one line per width x PE kind
        assert len(ax.lines) == len(WIDTHS) * len(KINDS)
    end = axes[3]
    assert end.get_xscale() == "log" and end.get_yscale() == "log"
    assert end.get_xlabel() == "width (d_model)"
    texts = [t.get_text() for t in end.get_legend().get_texts()]
    # drift = 2 width^-0.5 log1p(step): slope -0.5 for every kind
    assert len(texts) == len(KINDS)
    assert all("slope -0.50" in t for t in texts), texts


def test_ntk_cross(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["ntk-cross"][0]
    axes = data_axes(fig)
    assert len(axes) == 2 * len(WIDTHS)  # two metrics x width rows
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert ax.get_xlabel() == "probe length (tokens)"
        # 4 PE kinds as trained + rope/yarn x4
        assert len([ln for ln in ax.lines if ln.get_linestyle() != ":"]) == len(KINDS) + 1 + 1
    ratio_ax = axes[1]
    assert ratio_ax.get_ylabel() == "cross / train kernel cosine"
    # the ratio was computed from k_cross_cos_mean / k_train_cos_mean: 0.8 x (32/64)^0.2 / 0.8
    ys = sorted(y for ln in ratio_ax.lines[:1] for y in ln.get_ydata())
    assert ys[-1] == pytest.approx(0.5**0.2, rel=1e-6)


def test_ntk_plots_without_ntk_rows(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_trial_row(trial_dir(run, "t"), {"status": "done"}, {"model.width": 8})
    with pytest.raises(q.QueryError, match="no ntk rows"):
        plots.ntk_drift(run)

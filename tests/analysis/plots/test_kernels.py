"""Kernel heatmaps from arrays and from an .npz file, written in several formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from tests.analysis.plots.synthetic import dashed_vlines, data_axes


def test_kernel_matrices(rendered: dict[str, tuple[Figure, Path]], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(48, 10))
    k = feats @ feats.T
    fig = plots.plot_kernel_matrices(
        k[:16, :16], k[:16, :], {"mean |K_cross|": np.abs(k[:16]).mean(0)}, train_length=16
    )
    axes = data_axes(fig)
    assert len(axes) == 3
    assert axes[0].get_title() == "K_train (16×16)"
    assert axes[1].get_title() == "K_cross (16×48)"
    assert len(axes[0].images) == 1 and axes[1].images[0].get_array().shape == (16, 48)
    assert axes[2].get_xlabel() == "position (tokens)"
    assert len(axes[2].lines) == 2  # profile + L_train
    written = plots.save(fig, tmp_path / "k.png", formats=("pdf",), dpi=40)
    assert [p.name for p in written] == ["k.png", "k.pdf"]
    assert (tmp_path / "k.pdf").read_bytes()[:4] == b"%PDF"
    from_npz = data_axes(rendered["kernel"][0])  # found k.npz, train_length 8
    assert from_npz[1].get_title() == "K_cross (8×16)"
    assert dashed_vlines(from_npz[2])[0].get_xdata()[0] == 8
    with pytest.raises(ValueError, match="2-D"):
        plots.plot_kernel_matrices(np.ones(3), k, k[0])

"""The synthetic store and every plot kind drawn from it once, shared by the plot tests."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from tests.analysis.plots.synthetic import make_store

matplotlib.use("Agg")


@pytest.fixture(scope="package")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic run directory."""
    return make_store(tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="package")
def rendered(store: Path) -> dict[str, tuple[Figure, Path]]:
    """Every plot kind with its defaults, through the dispatcher, written as PNG once."""
    kernel = store.parent / "kernels" / "k.npz"
    kernel.parent.mkdir()
    k = np.add.outer(np.arange(16.0), np.arange(16.0))
    np.savez(kernel, K_train=k[:8, :8], K_cross=k[:8], profile=k[0], train_length=8)
    out = {}
    for kind in plots.KINDS:
        path = store.parent / "figures" / f"{kind}.png"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # readable defaults: e.g. no averaging warnings
            fig = plots.plot(kind, [kernel if kind == "kernel" else store], out=path)
        out[kind] = (fig, path)
    return out

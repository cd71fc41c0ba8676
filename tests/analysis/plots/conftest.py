"""The synthetic store and every plot kind drawn from it once, shared by the plot tests."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from tests.analysis.plots.synthetic import lr_rows, make_store

matplotlib.use("Agg")


class Rendered(Mapping[str, tuple[Figure, Path]]):
    """Every plot kind with its defaults, through the dispatcher, written as PNG: each kind
    drawn the first time a test asks for it, then kept (a test needs only the kinds it reads)."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.drawn: dict[str, tuple[Figure, Path]] = {}
        kernel = store.parent / "kernels" / "k.npz"
        kernel.parent.mkdir()
        k = np.add.outer(np.arange(16.0), np.arange(16.0))
        np.savez(kernel, K_train=k[:8, :8], K_cross=k[:8], profile=k[0], train_length=8)
        coord = store.parent / "coord_check.parquet"  # rows as `rope-lab coord-check` writes them
        pl.DataFrame(
            {
                "parametrization": ["sp"] * 4 + ["mup"] * 4,
                "width": [32, 32, 128, 128] * 2,
                "layer": ["embedding", "logits"] * 4,
                "rms_init": [1.0, 0.9, 1.0, 1.0, 1.0, 0.9, 1.0, 0.45],
                "rms_change": [0.02, 0.7, 0.02, 2.4, 0.02, 0.7, 0.02, 0.65],
            }
        ).write_parquet(coord)
        from tests.analysis.test_kernel_map import synthetic_map

        # the inputs of the kinds that do not read the run directory
        self.sources: dict[str, Any] = {
            "kernel": kernel,
            "coord-check": coord,
            "lr-transfer": lr_rows(),
            "kernel-map": synthetic_map(),
        }

    def __getitem__(self, kind: str) -> tuple[Figure, Path]:
        if kind not in self.drawn:
            if kind not in plots.KINDS:
                raise KeyError(kind)
            path = self.store.parent / "figures" / f"{kind}.png"
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # readable defaults: e.g. no averaging warnings
                fig = plots.plot(kind, [self.sources.get(kind, self.store)], out=path)
            self.drawn[kind] = (fig, path)
        return self.drawn[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(plots.KINDS)

    def __len__(self) -> int:
        return len(plots.KINDS)


# Session scope: a package-scoped fixture is rebuilt each time an xdist worker comes back to
# this package from another file, and drawing every kind takes seconds.
@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic run directory."""
    return make_store(tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="session")
def rendered(store: Path) -> Rendered:
    """Every plot kind with its defaults (figure, PNG path), drawn on first use."""
    return Rendered(store)

"""Every plot kind renders through the dispatcher; its errors on unknown kinds and options."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from rope_lab import plots
from rope_lab import query as q
from tests.plots.synthetic import png_ok


@pytest.mark.parametrize("kind", plots.KINDS)
def test_every_kind_renders_a_png(rendered: dict[str, tuple[Figure, Path]], kind: str) -> None:
    fig, path = rendered[kind]
    assert isinstance(fig, Figure)
    png_ok(path)
    assert fig.get_suptitle()


def test_dispatcher_errors(store: Path) -> None:
    with pytest.raises(q.QueryError, match="unknown plot kind 'heatmap'; kinds are: extrap"):
        plots.plot("heatmap", store)
    with pytest.raises(q.QueryError, match="does not take x"):
        plots.plot("positions", store, x="length")
    with pytest.raises(q.QueryError, match=r"unknown column.*'model\.widht'.*available columns"):
        plots.plot("extrapolation", store, col="model.widht")
    with pytest.raises(q.QueryError, match="use one of the extensions"):
        plots.plot("extrapolation", store, out="x.jpeg")

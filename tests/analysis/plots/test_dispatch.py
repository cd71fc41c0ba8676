"""Every plot kind renders through the dispatcher; its errors on unknown kinds and options."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from rope_lab.analysis import query as q
from rope_lab.analysis.plots.options import keyword_options
from rope_lab.cli import main
from tests.analysis.plots.synthetic import png_ok


@pytest.mark.parametrize("kind", plots.KINDS)
def test_every_kind_renders_a_png(rendered: dict[str, tuple[Figure, Path]], kind: str) -> None:
    fig, path = rendered[kind]
    assert isinstance(fig, Figure)
    png_ok(path)
    assert fig.get_suptitle()


@pytest.mark.parametrize("kind", plots.KINDS)
def test_every_kind_is_a_documented_function_of_source_options_and_out(kind: str) -> None:
    """What `plot`, `rope-lab plot --help` and `--set` read of a registered kind: a one-line
    help (its docstring's first line), `source` first, then keyword-only options, each with a
    default and an annotation that resolves (`--set` checks values against it), and `out`
    (None: nothing written)."""
    func = plots.plot_function(kind)
    assert plots.kind_help(kind)
    params = inspect.signature(func).parameters
    assert next(iter(params)) == "source"
    assert params["out"].kind is inspect.Parameter.KEYWORD_ONLY and params["out"].default is None
    for name, (param, hint) in keyword_options(func).items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert param.default is not inspect.Parameter.empty, name
        assert hint is not Any, f"option {name!r} has no annotation that resolves"


def test_dispatcher_errors(store: Path) -> None:
    with pytest.raises(q.QueryError, match="unknown plot kind 'heatmap'; kinds are: extrap"):
        plots.plot("heatmap", store)
    with pytest.raises(q.QueryError, match="does not take x"):
        plots.plot("positions", store, x="length")
    with pytest.raises(q.QueryError, match=r"unknown column.*'model\.widht'.*available columns"):
        plots.plot("extrapolation", store, col="model.widht")
    with pytest.raises(q.QueryError, match="use one of the extensions"):
        plots.plot("extrapolation", store, out="x.jpeg")


def test_a_registered_function_is_a_plot_kind(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plots.PLOTS.names() == plots.KINDS
    monkeypatch.setattr(plots.PLOTS, "_entries", dict(plots.PLOTS._entries))

    @plots.PLOTS.register("widths")
    def widths(source: object, *, metric: str = "loss", out: Path | None = None) -> Figure:
        """Widths of a sweep."""
        fig = Figure()
        fig.suptitle(f"{metric} of {source}")
        return fig

    assert plots.plot_options("widths") == ["metric"]
    assert plots.plot("widths", [store], metric="accuracy").get_suptitle() == f"accuracy of {store}"
    assert plots.kind_help("widths") == "Widths of a sweep"
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    assert "widths (widths of a sweep)" in " ".join(capsys.readouterr().out.split())

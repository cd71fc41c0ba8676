"""The `rope-lab plot` command: default output path, PDF and options, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rope_lab.cli import main
from tests.analysis.plots.synthetic import png_ok


def test_cli_plot_default_out(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plot", "positions", str(store), "--metric", "accuracy", "--row", "model.width"]
    assert main(argv) == 0
    png_ok(store / "plots" / "positions.png")
    assert "positions.png" in capsys.readouterr().out


def test_cli_plot_pdf_and_options(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.pdf"
    argv = ["plot", "scaling", str(store), "--out", str(out), "--x", "n_params",
            "--metric", "error_rate", "--hue", "none", "--col", "model.position.kind"]  # fmt: skip
    assert main(argv) == 0
    assert out.read_bytes()[:4] == b"%PDF"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plot", "bogus", "RUN"],
            "unknown plot kind 'bogus'; kinds are: extrapolation, positions",
        ),
        (["plot", "positions", "RUN", "--x", "length"], "does not take --x"),
        (["plot", "extrapolation", "RUN", "--hue", "nope"], "available columns:"),
        (["plot", "extrapolation", "RUN", "--out", "a.gif"], "use one of the extensions"),
        (["plot", "extrapolation", "/does/not/exist"], "not a run directory"),
    ],
)
def test_cli_plot_errors(
    store: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(store) if a == "RUN" else a for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1

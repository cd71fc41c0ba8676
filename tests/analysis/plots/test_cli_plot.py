"""The `rope-lab plot` command: default output path, PDF and options, one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from rope_lab.cli import main
from tests.analysis.plots.synthetic import data_axes, png_ok


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


def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures `rope-lab plot` draws from now on, in order."""
    figures: list[Any] = []
    draw = plots.plot

    def spy(kind: str, source: Any, **options: Any) -> Figure:
        figures.append(draw(kind, source, **options))
        return figures[-1]

    monkeypatch.setattr(plots, "plot", spy)
    return figures


def test_cli_plot_set_reaches_any_option(
    store: Path,
    tmp_path: Path,
    rendered: dict[str, tuple[Figure, Path]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figures = drawn(monkeypatch)
    argv = ["plot", "summary", str(store), "--out", str(tmp_path / "s.png"), "--set",
            "threshold=0.75"]  # fmt: skip
    assert main(argv) == 0
    titles = [ax.get_title() for ax in figures[-1].axes]
    assert any("≥ 75% of L_train accuracy" in t for t in titles), titles
    default = [ax.get_title() for ax in rendered["summary"][0].axes]
    assert any("≥ 90% of L_train accuracy" in t for t in default), default
    # a list, and a str option next to a flag
    argv = ["plot", "ntk-drift", str(store), "--out", str(tmp_path / "d.png"),
            "--set", "metrics=[velocity, relative_change]", "--set", "group=total",
            "--hue", "model.width"]  # fmt: skip
    assert main(argv) == 0
    titles = [ax.get_title() for ax in data_axes(figures[-1])]
    assert titles[:2] == ["velocity", "relative change"] and len(titles) == 3
    # a scalar for a sequence option is one metric; none for an option taking None
    argv = ["plot", "ntk-drift", str(store), "--out", str(tmp_path / "v.png"),
            "--set", "metrics=velocity"]  # fmt: skip
    assert main(argv) == 0
    assert len(data_axes(figures[-1])) == 2
    assert plots.plot_settings("scaling", ["hue=none", "n_boot=7", "length_ratio=2"]) == {
        "hue": None,
        "n_boot": 7,
        "length_ratio": 2.0,
    }
    assert plots.plot_settings("positions", ["length=64", "metric=1"]) == {
        "length": 64,
        "metric": "1",  # a str option takes a number as written
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--set", "nboot=5"],
            "plot kind 'scaling' has no option 'nboot' (--set); its options: metric, x, hue, "
            "col, length_ratio, method, offset, n_boot",
        ),
        (
            ["--set", "n_boot=many"],
            "--set n_boot=many: plot kind 'scaling' option n_boot takes int, got 'many' (str)",
        ),
        (["--set", "n_boot=2.5"], "option n_boot takes int, got 2.5 (float)"),
        (["--set", "offset=maybe"], "option offset takes bool, got 'maybe' (str)"),
        (["--set", "length_ratio=[1, 2]"], "option length_ratio takes float, got [1, 2] (list)"),
        (["--set", "n_boot=[1"], "--set n_boot=[1: not a YAML value"),
        (["--set", "n_boot"], "--set 'n_boot': expected KEY=VALUE"),
        (["--set", "n_boot=5", "--set", "n_boot=6"], "--set n_boot is given twice"),
        (["--set", "out=x.png"], "has no option 'out'"),
        (["--x", "n_params", "--set", "x=model.width"], "--x and --set x=... both given"),
    ],
)
def test_cli_plot_set_errors_before_reading_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked against the signature before any work: the run directory does not exist."""
    assert main(["plot", "scaling", "/does/not/exist", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_plot_help_lists_each_kinds_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plot", "ntk-drift", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--set KEY=VALUE" in text
    assert "ntk-drift: metrics (Sequence[str] | None = None), group (str = 'total')" in text
    assert "n_boot (int = 500)" in text and "summary: threshold (float = 0.9)" in text
    assert "kernel: (no options)" in text

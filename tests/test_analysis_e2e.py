"""Every plot kind and the report script on the results of a real (reduced) smoke sweep."""

import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from rope_lab.analysis.plots import KINDS, plot
from rope_lab.analysis.query import QueryError
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from tests.sweep.conftest import write_spec

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """sweeps/smoke.yaml's grid (4 PE kinds x 2 widths, NTK tracked) at tiny sizes, serially,
    with the passkey also scored at three needle depths (the ``depth`` plot's rows)."""
    tmp = tmp_path_factory.mktemp("smoke")
    spec = write_spec(
        tmp,
        name="smoke_small",
        grid={"model.position.kind": ["rope", "alibi", "learned", "none"], "model.width": [16, 32]},
        base__ntk={"probes": 3, "probe_multipliers": [2.0], "steps": [0, 4, 20]},
        base__model={"depth": 1, "head_dim": 8},
        base__eval__depths=[0.0, 0.5, 1.0],
    )
    summary = run_sweep(load_spec(spec), tmp / "runs", runner="serial", progress=False)
    assert summary.count("done") == 8
    return summary.run_dir


@pytest.mark.parametrize("kind", KINDS)
def test_every_plot_kind_renders_from_a_real_sweep(smoke_run, kind, tmp_path):
    source = smoke_run
    if kind == "kernel":
        source = next(smoke_run.glob("trials/*rope*/ntk/position_kernels.npz"))
    # The smoke sweep decodes nothing and keeps no attention statistics, and coord-check and
    # kernel-map read the Parquet files of `rope-lab coord-check` and `rope-lab kernel-map`
    # (coord-check's slow CLI test draws one, tests/analysis/test_kernel_map.py the other):
    # each error says what the kind needs.
    needs = {
        "decode": r"eval\.decode\.protocols",
        "attention_mass": r"eval\.attention_stats: true",
        "coord-check": r"not a file; give the Parquet file of rope-lab coord-check",
        "kernel-map": r"not a file; give the Parquet file of rope-lab kernel-map",
    }
    if kind in needs:
        with pytest.raises(QueryError, match=needs[kind]):
            plot(kind, source, out=tmp_path / f"{kind}.png")
        return
    out = tmp_path / f"{kind}.png"
    fig = plot(kind, source, out=out)
    assert fig.axes and any(ax.has_data() for ax in fig.axes)
    image = mpimg.imread(out)
    assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0


def test_report_script_on_a_real_sweep(smoke_run, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "analysis" / "report.py"),
            str(smoke_run),
            "--out",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "alibi" in text and "learned" in text
    assert (tmp_path / "report" / "extrapolation_summary.csv").exists()


def test_reproduce_script_on_a_real_sweep(smoke_run, tmp_path):
    """The write-up of a real run: the verdict table of every claim (one seed: the ordering
    claims are inconclusive, saying why; dynamic is not in this run), and its figures."""
    out = subprocess.run(
        [sys.executable, str(REPO / "analysis" / "reproduce.py"), str(smoke_run), "--out",
         str(tmp_path / "docs")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "docs" / "reproduction.md").read_text()
    assert "| claim | scope | verdict |" in text
    row = next(line for line in text.splitlines() if line.startswith("| absolute_degrade_more |"))
    assert "inconclusive" in row and "1 seed(s) in the smallest arm" in row
    for figure in ("extrapolation.png", "tail_cosine.png"):
        image = mpimg.imread(tmp_path / "docs" / "reproduction" / figure)
        assert image.shape[0] > 100 and image.std() > 0

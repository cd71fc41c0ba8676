"""NTK drift vs step with the fitted slopes vs width, cross-kernel alignment vs probe length."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from matplotlib.figure import Figure

from rope_lab.analysis import plots
from rope_lab.analysis import query as q
from rope_lab.registry import NTK_METRICS
from rope_lab.results import trial_dir, write_trial_row
from tests.analysis.plots.synthetic import KINDS, WIDTHS, data_axes


def test_ntk_drift(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["ntk-drift"][0]
    axes = data_axes(fig)
    assert len(axes) == 4  # three metrics + end-of-training panel
    for ax, metric in zip(axes[:3], plots.drift_metrics(), strict=True):
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


def test_a_registered_drift_metric_is_a_default_panel(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metric registered with ``drift`` (here at test time, into a copy of the registry) is
    drawn by ntk-drift's defaults where the rows have it, and left out where they do not."""
    from rope_lab.ntk.metrics import Metric

    NTK_METRICS.names()  # loaded, so the copy holds every registered metric
    monkeypatch.setattr(NTK_METRICS, "_entries", dict(NTK_METRICS._entries))
    NTK_METRICS.register("probe_drift")(Metric(lambda k: 0.0, "train", False, drift=True))
    NTK_METRICS.register("probe_plain")(Metric(lambda k: 0.0, "train", False))
    assert plots.drift_metrics()[-1] == "probe_drift"
    assert "probe_plain" not in plots.drift_metrics()

    frame = q.ntk_table(store)
    extra = frame.filter(pl.col("metric") == "distance_from_init").with_columns(
        pl.lit("probe_drift").alias("metric"), pl.col("value") * 7
    )
    fig = plots.ntk_drift(pl.concat([frame, extra], how="vertical_relaxed"))
    titles = [ax.get_title() for ax in data_axes(fig)]
    expected = ["distance_from_init", "relative_change", "velocity", "probe_drift"]
    assert titles[:-1] == [plots.name_of(m) for m in expected]
    top = max(y for ln in data_axes(fig)[3].lines for y in ln.get_ydata())
    drift = extra.filter(pl.col("step") > 0).get_column("value")
    assert top <= drift.max() and top >= drift.min()  # the panel draws the metric's own rows

    old = [ax.get_title() for ax in data_axes(plots.ntk_drift(frame))]  # runs before it
    assert old[:-1] == [plots.name_of(m) for m in expected[:-1]]


def test_default_drift_panels_of_a_group_without_total_only_metrics(store: Path) -> None:
    """velocity is written for the total kernel only: a group's default panels leave it out."""
    frame = q.ntk_table(store)
    frame = frame.filter((pl.col("metric") != "velocity") | (pl.col("group") == "total"))
    fig = plots.ntk_drift(frame, group="mlp")
    titles = [ax.get_title() for ax in data_axes(fig)][:-1]
    assert titles == [plots.name_of(m) for m in ("distance_from_init", "relative_change")]
    with pytest.raises(q.QueryError, match="no ntk rows of a drift metric"):
        plots.ntk_drift(store, group="no_such_group")


def test_the_default_drift_metrics_import_no_jax() -> None:
    """The drift metrics come from the registry, whose metrics module needs only numpy."""
    code = (
        "import sys; from rope_lab.analysis import plots; "
        "assert 'velocity' in plots.drift_metrics(); print('jax' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"

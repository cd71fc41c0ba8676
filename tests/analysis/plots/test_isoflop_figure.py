"""The isoflop figure draws the table's numbers: profile minima at N*, the frontier's slope a,
and a refusal instead of a frontier when no profile has 3 distinct N."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rope_lab.analysis import plots
from tests.analysis.plots.synthetic import make_store
from tests.analysis.test_isoflop_cli import BUDGETS, n_opt, write_store


def test_minima_and_frontier_drawn_where_the_table_puts_them(tmp_path: Path) -> None:
    run = write_store(tmp_path / "run")
    fig = plots.plot("isoflop", [run], n_boot=0, length_ratio=1.0)
    left, right = fig.axes[:2]
    stars = [line for line in left.lines if line.get_marker() == "*"]
    got = sorted(float(s.get_xdata()[0]) for s in stars)
    assert got == pytest.approx([n_opt(c) for c in BUDGETS], rel=1e-3)
    (frontier,) = [line for line in right.lines if line.get_linestyle() == "-"]
    xs, ys = (np.asarray(v, dtype=float) for v in frontier.get_data())
    slope = np.polyfit(np.log(xs), np.log(ys), 1)[0]
    assert slope == pytest.approx(0.5, abs=1e-3)
    assert "a = 0.50" in right.get_legend().get_texts()[0].get_text()
    assert "at L_train" in fig.get_suptitle()


def test_profiles_with_too_few_sizes_are_refused_on_the_figure(tmp_path: Path) -> None:
    """The synthetic sweep varies width at one token budget: every C has a single N."""
    fig = plots.plot("isoflop", [make_store(tmp_path / "synthetic")], n_boot=0)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts and all(t.startswith("no frontier:\n0 accepted profile(s)") for t in texts)

"""Scaling plots recover the synthetic exponent, with a bootstrap band only over >= 3 seeds."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from rope_lab.analysis import plots
from rope_lab.analysis import query as q
from tests.analysis.plots.synthetic import KINDS, data_axes


def test_scaling_recovers_exponent(store: Path) -> None:
    fig = plots.scaling(store, metric="distance_from_init", n_boot=100)
    (ax,) = data_axes(fig)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "width (d_model)"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(texts) == len(KINDS)
    assert all("b = 0.50" in t for t in texts), texts
    assert all("(n=4, no CI)" in t for t in texts)  # 2 seeds: too few to resample
    fig = plots.scaling(store, metric="loss", x="n_params", hue=None)
    (ax,) = data_axes(fig)
    assert ax.get_xlabel() == "parameters"
    assert len(ax.collections) == 1  # points, no band
    # a third seed: the bootstrap over seeds gives a band and an interval
    e = q.eval_table(store)
    third = e.filter(pl.col("train.seed") == 0).with_columns(
        pl.lit(2, dtype=pl.Int64).alias("train.seed"),
        pl.col("trial_id") + "-s2",
        pl.col("loss") * 1.02,
    )
    fig = plots.scaling(pl.concat([e, third]), metric="loss", hue=None, n_boot=100)
    (ax,) = data_axes(fig)
    assert len(ax.collections) == 2  # points + band
    (text,) = [t.get_text() for t in ax.get_legend().get_texts()]
    assert re.search(r"b = 0\.\d\d \[0\.\d\d, 0\.\d\d\]", text), text

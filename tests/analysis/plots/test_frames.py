"""Seed counting behind a plotted point."""

import polars as pl

from rope_lab.analysis.plots.frames import n_seeds


def test_trials_that_differ_in_a_config_column_are_not_seeds():
    frame = pl.DataFrame(
        {
            "trial_id": ["a", "b", "c", "d"],
            "label": ["kerple_log"] * 4,
            "train.seed": [0, 0, 0, 1],
            "model.position.kerple_log.r2_init": [0.5, 2.0, 0.5, 0.5],
        }
    )
    assert n_seeds(frame.head(2), ["label"]) == 1  # two configs, one seed
    assert n_seeds(frame, ["label"]) == 2
    assert n_seeds(frame.drop("train.seed"), ["label"]) == 4  # no seed column: trials

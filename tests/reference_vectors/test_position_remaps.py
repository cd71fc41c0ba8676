"""The `position_remaps` table against the papers' relative positions."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from rope_lab import reference_vectors as rv
from rope_lab.registry import SCALINGS


def test_position_remaps_are_the_papers_relative_positions():
    """Every row of position_remaps: its relative position equals the paper's definition
    (tests/model/scalings/test_remaps.py's transcriptions) at the resolved parameters, and
    the remap edge cases are there (window 1 clamps every pair but the diagonal)."""
    from tests.model.scalings import test_remaps as papers

    remaps = tuple(n for n in SCALINGS.names() if SCALINGS[n].remaps)
    vectors = rv.Vectors(methods=remaps)
    frame = rv.TABLES["position_remaps"].build(vectors)
    assert set(frame["method"].unique()) == set(remaps)
    assert list(frame.columns) == list(rv.TABLES["position_remaps"].columns)
    cases = {c.case_id: c for c in vectors.cases}
    paper = {
        "rerope": lambda i, j, p, c: papers.rerope(i, j, p["window"]),
        "leaky_rerope": lambda i, j, p, c: papers.leaky_rerope(i, j, p["window"], c.factor),
        "self_extend": lambda i, j, p, c: papers.self_extend(i, j, p["group"], p["window"]),
        "dual_chunk": lambda i, j, p, c: papers.dual_chunk(
            i, j, p["chunk_size"], p["local_window"]
        ),
        "string": lambda i, j, p, c: papers.string(i, j, p["shift"], p["local_window"]),
    }  # fmt: skip
    for (case_id, resolved), rows in frame.group_by("case_id", "resolved"):
        c = cases[case_id]
        i, j = rows["query_position"].to_numpy(), rows["key_position"].to_numpy()
        want = paper[c.method](i, j, json.loads(resolved), c)
        np.testing.assert_allclose(rows["relative"].to_numpy(), want, rtol=1e-6, err_msg=case_id)
    narrow = frame.filter(pl.col("resolved") == '{"slope": 0.0, "window": 1}')
    assert (narrow.filter(pl.col("query_position") > pl.col("key_position"))["relative"] == 1).all()

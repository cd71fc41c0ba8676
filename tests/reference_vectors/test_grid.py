"""The cases of the grid and of the tiny model: every registered method has both, every case is
valid, and a required field without an example value is named."""

from __future__ import annotations

import pytest

from rope_lab import reference_vectors as rv
from rope_lab.registry import SCALINGS


def test_every_registered_method_has_grid_and_model_cases():
    cases = rv.grid_cases()
    assert {c.method for c in cases} == set(SCALINGS.names())
    assert {c.method for c in rv.model_cases()} == set(SCALINGS.names())
    assert len({c.case_id for c in cases}) == len(cases)
    for c in cases:  # every case is valid for its method
        c.frequencies()
    # length-dependent methods: seq_len below, at and above the training length
    for method in SCALINGS.names():
        if SCALINGS[method].length_dependent:
            seqs = {c.seq_len for c in cases if c.method == method and c.note == "base"}
            assert {None, 1024, 2047, 2048, 2049, 4096, 8192, 32768} <= seqs, method


def test_a_required_field_without_an_example_is_named(monkeypatch):
    monkeypatch.delitem(rv.REQUIRED_EXAMPLES, "long_factor")
    with pytest.raises(ValueError, match=r"'longrope': required field 'long_factor'"):
        rv.grid_cases(("longrope",))

"""Trial ids are the addresses of finished results: every shipped spec's ids, and those of a
variant per field added after trials were first run, stay exactly what they were
(`tests/fixtures/trial_ids.json`, written by `make_trial_ids.py`)."""

import json
from pathlib import Path

import pytest

from tests.fixtures.make_trial_ids import OUT, collect
from tests.fixtures.shipped_specs import NEEDS_DATA

PINNED = json.loads(OUT.read_text())


@pytest.fixture(scope="module")
def current() -> dict[str, list[str]]:
    return collect()


@pytest.mark.parametrize("source", sorted(PINNED))
def test_trial_ids_are_pinned(current, source):
    assert current.get(source) == PINNED[source], f"{source}: trial ids moved"


def test_every_shipped_spec_is_pinned_or_needs_data(current):
    specs = {p.name for p in Path(OUT).parents[2].joinpath("sweeps").glob("*.yaml")}
    assert specs - NEEDS_DATA == {s for s in PINNED if s.endswith(".yaml") and "/" not in s}

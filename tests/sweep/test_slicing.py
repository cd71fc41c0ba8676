"""Slices of a sweep (`--only KEY=VALUE`): exactly the trials taking every given axis value, in
the spec's order and under the spec's own trial ids; unknown keys and untaken values refused
with what is allowed."""

import pytest

from rope_lab.config import ConfigError
from rope_lab.sweep.slicing import parse_only, slice_spec
from rope_lab.sweep.spec import axis_assignments, parse_spec
from tests.sweep.test_spec import spec_dict

GRID = {"model.position.kind": ["rope", "alibi", "none"], "train.seed": [0, 1]}
ZIP = [{"model.width": [32, 64], "train.lr": [1e-3, 3e-3]}]


def _spec():
    return parse_spec(spec_dict(grid=GRID, zip=ZIP))


def test_values_are_read_as_yaml():
    only = parse_only(["model.position.kind=rope", "train.seed=1", "train.lr=3e-3"])
    assert only == {"model.position.kind": "rope", "train.seed": 1, "train.lr": 3e-3}
    assert parse_only(["task.params={path: a.txt}"]) == {"task.params": {"path": "a.txt"}}


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (["seed"], r"^--only seed: expected KEY=VALUE, e\.g\. task\.name=lm_text$"),
        (["=1"], r"^--only =1: expected KEY=VALUE"),
        (["train.seed=0", "train.seed=1"], r"^--only train\.seed: given twice$"),
    ],
)
def test_malformed_items_are_named(items, match):
    with pytest.raises(ConfigError, match=match):
        parse_only(items)


def test_a_slice_keeps_exactly_the_matching_trials_in_order_and_their_ids():
    spec = _spec()
    assert len(spec.trials) == 12
    cut = slice_spec(spec, {"train.seed": 1, "model.width": 64.0})  # numbers by value
    brute = [
        t
        for t in spec.trials
        if axis_assignments(t, spec)["train.seed"] == 1 and t.model.width == 64
    ]
    assert [t.trial_id for t in cut.trials] == [t.trial_id for t in brute]
    assert [t.model.position.kind for t in cut.trials] == ["rope", "alibi", "none"]
    assert all(t.train.lr == 3e-3 for t in cut.trials)  # its zip partner
    assert slice_spec(spec, {}) is spec
    assert cut.axes == spec.axes and cut.name == spec.name  # the sweep's own run directory


def test_a_key_that_is_not_an_axis_is_refused_naming_the_axes():
    axes = r"model\.position\.kind, train\.seed, model\.width, train\.lr"
    match = rf"^--only train\.steps: not an axis of t; its axes: {axes}$"
    with pytest.raises(ConfigError, match=match):
        slice_spec(_spec(), {"train.steps": 10})


def test_a_value_no_trial_takes_is_refused_naming_the_values():
    with pytest.raises(
        ConfigError,
        match=r'^--only model\.position\.kind=t5: no trial of t takes it; it takes "alibi", '
        r'"none", "rope"$',
    ):
        slice_spec(_spec(), {"model.position.kind": "t5"})


def test_a_slice_by_a_float_written_as_yaml_1_1_text_matches():
    cut = slice_spec(_spec(), parse_only(["train.lr=1e-3"]))
    assert {t.model.width for t in cut.trials} == {32} and len(cut.trials) == 6


def test_values_taken_only_apart_are_refused_together():
    with pytest.raises(ConfigError, match=r"^--only model\.width=32, train\.lr=0\.003: no trial "
                       r"of t takes all of these together$"):  # fmt: skip
        slice_spec(_spec(), {"model.width": 32, "train.lr": 0.003})

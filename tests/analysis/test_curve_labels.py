"""Curve labels: trials that differ in how positions enter never share a label."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from rope_lab.analysis.curve_labels import label_expr
from rope_lab.config import TrialConfig, replace, validate
from rope_lab.registry import POSITIONS
from rope_lab.results.columns import flatten_config
from tests.helpers import tiny_trial


def _labels(trials: list[TrialConfig]) -> list[str]:
    rows = [{**flatten_config(t), "method": "none", "factor": 1.0} for t in trials]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    return frame.select(label_expr(frame.columns))["label"].to_list()


def _trial(kind: str, **changes: object) -> TrialConfig:
    return validate(replace(tiny_trial(kind, width=16, head_dim=8, depth=1), **changes))


def test_encoding_fields_off_their_defaults_name_themselves() -> None:
    trials = [
        _trial("rope"),
        _trial("rope", **{"model.position.rope.rotary_fraction": 0.5}),
        _trial("rope", **{"model.position.rope.theta": 5.0e5}),
        _trial("kerple_log"),
        _trial("kerple_log", **{"model.position.kerple_log.r2_init": 2.0}),
        _trial("t5_bias", **{"model.position.t5_bias.num_buckets": 16}),
        _trial(
            "learned",
            **{"model.position.randomized": True, "model.position.random_max_length": 64},
        ),
    ]
    assert _labels(trials) == [
        "rope",
        "rope rotary_fraction 0.5",
        "rope theta 500000",
        "kerple_log",
        "kerple_log r2_init 2",
        "t5_bias num_buckets 16",
        "learned +randomized",
    ]
    assert len(set(_labels(trials))) == len(trials)


def test_scaled_rows_carry_the_variant_too() -> None:
    """Rows of a scaling applied at evaluation name the variant before the scaling."""
    trial = _trial("rope", **{"model.position.rope.rotary_fraction": 0.5})
    rows = [{**flatten_config(trial), "method": m, "factor": f} for m, f in (("default", 1.0),
            ("yarn", 4.0), ("temperature", 1.0))]  # fmt: skip
    frame = pl.DataFrame(rows, infer_schema_length=None)
    assert frame.select(label_expr(frame.columns))["label"].to_list() == [
        "rope rotary_fraction 0.5",
        "rope rotary_fraction 0.5/yarn x4",
        "rope rotary_fraction 0.5/log-length temperature",
    ]


def test_text_protocols_name_themselves() -> None:
    base = {**flatten_config(_trial("alibi")), "method": "none", "factor": 1.0}
    rows = [
        {**base, "eval.text_protocol": p, "eval.text_stride": s}
        for p, s in (("random", None), ("nonoverlapping", None), ("sliding", 4), ("sliding", None))
    ]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    assert frame.select(label_expr(frame.columns))["label"].to_list() == [
        "alibi",
        "alibi (non-overlapping windows)",
        "alibi (sliding windows, stride 4)",
        "alibi (sliding windows, stride 16)",  # the default stride: train.length
    ]


def test_the_linearised_twin_names_itself() -> None:
    """A lazy trial (`train.regime`) is its own variant; rows written before the field exist
    read as the network (rich)."""
    base = {**flatten_config(_trial("learned")), "method": "none", "factor": 1.0}
    rows = [{**base, "train.regime": r} for r in ("rich", "lazy", None)]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    assert frame.select(label_expr(frame.columns))["label"].to_list() == [
        "learned",
        "learned +lazy",
        "learned",
    ]


# Fields of the rotary family that name a training-time scaling ("rope (linear x2)"), not a
# variant of the encoding (labels of trained scalings: tests/analysis/plots/test_curves.py).
TRAINED_SCALING = ("scaling", "factor", "params")


def off_default(field: dataclasses.Field) -> int | float:
    """A valid value off a numeric field's default (half of it)."""
    value = field.default
    if isinstance(value, bool) or not isinstance(value, int | float):
        pytest.fail(f"no off-default value for field {field.name}={value!r}: extend off_default")
    return value / 2 if isinstance(value, float) else value // 2


@pytest.mark.parametrize("kind", POSITIONS.names())
def test_every_field_of_every_encoding_off_its_default_names_itself(kind: str) -> None:
    """Every registered encoding, each of its own fields set off its default in turn."""
    fields = [f for f in dataclasses.fields(POSITIONS[kind]) if f.name not in TRAINED_SCALING]
    changes = [{f"model.position.{kind}.{f.name}": off_default(f)} for f in fields]
    labels = _labels([_trial(kind)] + [_trial(kind, **c) for c in changes])
    assert labels == [kind] + [f"{kind} {f.name} {off_default(f):g}" for f in fields]

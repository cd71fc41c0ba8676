"""Config -> trials-table columns: dotted names, polars dtypes from type hints, column values.

The walk over a config (nested and optional nested dataclasses, variant fields such as
``model.position.options`` with columns ``model.position.<kind>.<field>``) is
:mod:`rope_lab.typed`'s; this module maps a leaf's type hint to a dtype and its value to a
column value: a scalar, a homogeneous list, or a JSON string.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, Literal

import numpy as np
import polars as pl

from rope_lab import typed


def config_schema(cls: type, *, prefix: str = "") -> dict[str, pl.DataType]:
    """Flattened column dtypes of the (frozen) dataclass ``cls``, from its type hints.

    ``{"seed": Int64, "model.width": Int64, "model.position.rope.theta": Float64, ...}``:
    one column per leaf of :func:`rope_lab.typed.dotted_fields` (nested and optional nested
    configs joined with ``"."``, a variant field's columns for every registered variant).
    ``int`` -> Int64, ``float`` -> Float64, ``str``/``Path`` -> String, ``bool`` -> Boolean,
    Enum/Literal -> dtype of their values, ``tuple[int, ...]``/``list[float]`` -> List(...),
    ``X | None`` -> X (all columns are nullable), anything else (dicts, heterogeneous
    tuples, ...) -> String (JSON).
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"config_schema expects a dataclass type, got {cls!r}")
    return {path: _hint_dtype(hint) for path, hint in typed.dotted_fields(cls, prefix).items()}


def flatten_config(cfg: Any, *, prefix: str = "") -> dict[str, Any]:
    """Flatten a (nested, frozen) dataclass instance into ``{"model.width": 256, ...}``.

    One entry per leaf of :func:`rope_lab.typed.leaf_values`: the chosen variant's fields
    under its name, nulls for every column of a ``None`` nested config. Tuples/lists of
    scalars become lists (polars List columns), other containers JSON strings; values agree
    with :func:`config_schema` of the class. A plain mapping is accepted at the top level
    (its dataclass values are flattened under their key).
    """
    if isinstance(cfg, Mapping):
        out: dict[str, Any] = {}
        for key, value in cfg.items():
            if _is_instance(value):
                out.update(flatten_config(value, prefix=f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = _scalarize(value)
        return out
    if not _is_instance(cfg):
        raise TypeError(f"flatten_config expects a dataclass instance, got {type(cfg)!r}")
    leaves = typed.leaf_values(cfg, prefix)
    return {path: _column_value(hint, value) for path, (hint, value) in leaves.items()}


def _is_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _column_value(hint: Any, value: Any) -> Any:
    if isinstance(value, tuple | list | set | frozenset) and _hint_dtype(hint) == pl.String():
        return _to_json(value)  # declared as a JSON column (e.g. a bare `tuple` hint)
    if _hint_dtype(hint) == pl.String() and isinstance(value, int | float):
        return str(value)  # a union such as `str | float` is one String column
    return _scalarize(value)


def _strip_optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _common_dtype(dtypes: Iterable[pl.DataType | None]) -> pl.DataType | None:
    """One dtype for a set of scalar dtypes (ints and floats unify to Float64), else None."""
    unique = set(dtypes)
    if None in unique or not unique:
        return None
    if len(unique) == 1:
        return unique.pop()
    if unique <= {pl.Int64(), pl.Float64()}:
        return pl.Float64()
    return None


def _value_dtype(value: Any) -> pl.DataType | None:
    if isinstance(value, bool):
        return pl.Boolean()
    if isinstance(value, int):
        return pl.Int64()
    if isinstance(value, float):
        return pl.Float64()
    if isinstance(value, str):
        return pl.String()
    return None


def _scalar_dtype(hint: Any) -> pl.DataType | None:
    """Polars dtype of a scalar type hint, or None when the hint is not a scalar."""
    if hint is bool:
        return pl.Boolean()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _common_dtype(_value_dtype(m.value) for m in hint) or pl.String()
    if hint is int:
        return pl.Int64()
    if hint is float:
        return pl.Float64()
    if hint is str or (isinstance(hint, type) and issubclass(hint, PurePath)):
        return pl.String()
    if typing.get_origin(hint) is Literal:
        return _common_dtype(_value_dtype(v) for v in typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _common_dtype(_scalar_dtype(a) for a in args)
    return None


_SEQUENCE_ORIGINS = (tuple, list, Sequence, frozenset, set)


def _hint_dtype(hint: Any) -> pl.DataType:
    """Column dtype of a leaf field's type hint; String (JSON) for anything not scalar."""
    hint = _strip_optional(hint)
    scalar = _scalar_dtype(hint)
    if scalar is not None:
        return scalar
    if typing.get_origin(hint) in _SEQUENCE_ORIGINS:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        inner = _common_dtype(_scalar_dtype(_strip_optional(a)) for a in args)
        if inner is not None:
            return pl.List(inner)
    return pl.String()


def _json_default(value: Any) -> Any:
    if _is_instance(value):
        return typed.to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default, sort_keys=True)


_SCALARS = (bool, int, float, str, enum.Enum, PurePath, np.generic)


def _scalarize(value: Any) -> Any:
    """A config value as a column value: scalar, homogeneous list, or JSON string."""
    if value is None or isinstance(value, bool | int | float | str | dt.date | dt.timedelta):
        return value
    if isinstance(value, enum.Enum):
        return _scalarize(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list | set | frozenset):
        raw = sorted(value, key=repr) if isinstance(value, set | frozenset) else list(value)
        if all(v is None or isinstance(v, _SCALARS) for v in raw):
            items = [_scalarize(v) for v in raw]
            dtype = _common_dtype(_value_dtype(v) for v in items if v is not None)
            if dtype == pl.Float64():
                return [None if v is None else float(v) for v in items]
            if dtype is not None or all(v is None for v in items):
                return items
        return _to_json(raw)
    return _to_json(value)


# Descriptor columns written beside the flattened config, so analysis reads what a trial's
# registered variants declare without importing them (and JAX with them).
ENCODING_PREFIX = "encoding."
OPTIONS_COLUMN = "encoding.options"
TASK_METRIC_COLUMN = "task.default_metric"
# the model family's own curve label ("CNN k3 d1,2,4"; "" when the encoding names the curve)
# and receptive field (tokens an output sees; null for attention, which sees the whole prefix)
FAMILY_LABEL_COLUMN = "family.label"
RECEPTIVE_FIELD_COLUMN = "family.receptive_field"
# the rotary family's training-time scaling: named by the label's "(linear x2)", not as a field
NAMED_ELSEWHERE = frozenset({"scaling", "factor", "params"})
VARIANT_SCHEMA: dict[str, pl.DataType] = {
    "encoding.family": pl.String(),
    "encoding.rotary": pl.Boolean(),
    "encoding.additive_bias": pl.Boolean(),
    "encoding.learned": pl.Boolean(),
    "encoding.shift_invariant": pl.Boolean(),
    OPTIONS_COLUMN: pl.String(),
    TASK_METRIC_COLUMN: pl.String(),
    FAMILY_LABEL_COLUMN: pl.String(),
    RECEPTIVE_FIELD_COLUMN: pl.Int64(),
}


def options_text(options: Any) -> str:
    """An encoding config's fields that differ from their defaults, as a label suffix
    (``" rotary_fraction 0.25"``; ``""`` at the defaults), in field order."""
    parts = []
    for f in dataclasses.fields(options):
        if f.name in NAMED_ELSEWHERE or f.default is dataclasses.MISSING:
            continue
        value = getattr(options, f.name)
        if value is None or value == f.default:
            continue
        shown = str(_scalarize(value))
        parts.append(f" {f.name} {shown[:-2] if shown.endswith('.0') else shown}")
    return "".join(parts)


def variant_columns(trial: Any) -> dict[str, Any]:
    """The descriptor columns of a trial config: its model-wide encoding's
    ``attributes()`` as ``encoding.<name>`` (a family without one, the CNN, declares its own:
    ``FamilyConfig.encoding_attributes``), its off-default fields (:func:`options_text`), its
    task's ``default_metric``, and its model family's label and receptive field
    (``family.label``, ``family.receptive_field``)."""
    options, family = trial.model.position.options, trial.model.arch
    attributes = family.encoding_attributes(trial.model)
    out: dict[str, Any] = {f"{ENCODING_PREFIX}{k}": v for k, v in attributes.items()}
    out[OPTIONS_COLUMN] = "" if family.label() else options_text(options)
    from rope_lab.registry import TASKS  # the writer has imported the task already

    out[TASK_METRIC_COLUMN] = str(TASKS[trial.task.name].default_metric)
    out[FAMILY_LABEL_COLUMN] = trial.model.arch.label()
    out[RECEPTIVE_FIELD_COLUMN] = trial.model.receptive_field
    return out

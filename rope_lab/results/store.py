"""Writing the results store: per-trial Parquet segments, the trial row and the success marker.

Every segment file is written atomically (hidden temp file + ``os.replace``), so readers never
see a partial file, and writing a segment name again replaces it: a resumed trial rewrites its
segments instead of duplicating rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rope_lab.results import columns
from rope_lab.results.schema import (
    REQUIRED,
    STATUSES,
    SUCCESS_MARKER,
    TABLE_SCHEMAS,
    TRIAL_SEGMENT,
    TRIALS_SCHEMA,
    check_table,
)
from rope_lab.runtime.atomic import atomic_write
from rope_lab.runtime.checked_files import proof_problem

_SEGMENT_RE = re.compile(r"[A-Za-z0-9_=+\-][A-Za-z0-9_.=+\-]*")


def trial_dir(run_dir: str | Path, trial_id: str) -> Path:
    """``<run_dir>/trials/<trial_id>``."""
    if not trial_id or "/" in trial_id or trial_id.startswith("."):
        raise ValueError(f"invalid trial id {trial_id!r}")
    return Path(run_dir) / "trials" / trial_id


def append_rows(
    trial_dir: str | Path,
    table: str,
    rows: Sequence[Mapping[str, Any]] | pl.DataFrame,
    *,
    segment: str,
    extra_schema: Mapping[str, pl.DataType] | None = None,
) -> Path:
    """Write ``rows`` as segment ``<trial_dir>/<table>/<segment>.parquet``, atomically.

    Columns are validated against the table's declared schema (an unknown column raises
    ValueError listing the table's columns), cast to it, and missing ones filled with nulls;
    ``trial_id`` defaults to the trial folder's name. Writing the same segment again replaces
    it. ``extra_schema`` declares additional columns, for the trials table only (config).
    """
    check_table(table)
    _check_segment(segment)
    schema = dict(TABLE_SCHEMAS[table])
    if extra_schema:
        if table != "trials":
            raise ValueError("extra_schema is only allowed for the 'trials' table")
        for name, dtype in extra_schema.items():
            schema.setdefault(name, dtype)
    trial_dir = Path(trial_dir)
    df = _conform(rows, table, schema, trial_dir.name)
    path = trial_dir / table / f"{segment}.parquet"
    return atomic_write(path, lambda f: df.write_parquet(f, compression="zstd"))


def write_trial_row(
    trial_dir: str | Path,
    row: Mapping[str, Any],
    config_columns: Mapping[str, Any] | Any,
    *,
    config_schema: Mapping[str, pl.DataType] | None = None,
) -> Path:
    """Write the single-row trials table of a trial (segment ``"trial"``), atomically.

    ``row`` holds the TRIALS_SCHEMA columns (``trial_id`` defaults to the folder name;
    ``status`` must be one of STATUSES). ``config_columns`` is the flattened config
    (:func:`flatten_config`) or the config dataclass instance itself; column dtypes come from
    ``config_schema`` (derived from the instance's class when one is given) or are inferred.
    """
    if dataclasses.is_dataclass(config_columns) and not isinstance(config_columns, type):
        if config_schema is None:
            config_schema = columns.config_schema(type(config_columns))
        config_columns = columns.flatten_config(config_columns)
    config_columns = dict(typing.cast(Mapping[str, Any], config_columns))
    status = row.get("status")
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    merged = dict(config_columns)
    for name, value in row.items():
        if name in merged and merged[name] != value:
            raise ValueError(
                f"column {name!r} is both a trial column ({value!r}) and a config column "
                f"({merged[name]!r})"
            )
        merged[name] = value
    unknown = [c for c in row if c not in TRIALS_SCHEMA]
    if unknown:
        raise ValueError(
            f"unknown trial column(s) {unknown}; trial columns are {list(TRIALS_SCHEMA)}"
        )
    declared = dict(config_schema or {})
    extra = {
        k: declared[k] if k in declared else _infer_dtype(k, v)
        for k, v in config_columns.items()
        if k not in TRIALS_SCHEMA
    }
    return append_rows(trial_dir, "trials", [merged], segment=TRIAL_SEGMENT, extra_schema=extra)


def mark_success(
    trial_dir: str | Path,
    stages: Sequence[str] | None = None,
    *,
    files: Mapping[str, Mapping[str, int]] | None = None,
) -> Path:
    """Atomically create ``<trial_dir>/_SUCCESS``: the UTC completion time and, when given, the
    stages the trial finished (`is_finished` then tells whether those are the ones asked for)
    and ``files``, ``{path relative to trial_dir: {"bytes", "crc32"}}`` of the files it wrote
    (`is_finished` then checks they are still those files)."""
    marker: dict[str, Any] = {"finished_at": dt.datetime.now(dt.UTC).isoformat()}
    if stages is not None:
        marker["stages"] = list(stages)
    if files is not None:
        marker["files"] = {rel: dict(p) for rel, p in files.items()}
    stamp = json.dumps(marker).encode()
    return atomic_write(Path(trial_dir) / SUCCESS_MARKER, lambda f: f.write(stamp))


def is_finished(trial_dir: str | Path, stages: Sequence[str] | None = None) -> bool:
    """Whether :func:`mark_success` has completed for this trial and every file it recorded is
    still as written (none missing or changed); with `stages`, for exactly that set of stages (a
    marker that lists none, or others, is not)."""
    path = Path(trial_dir) / SUCCESS_MARKER
    if not path.is_file():
        return False
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    for rel, recorded in (marker.get("files") or {}).items():
        if proof_problem(Path(trial_dir) / rel, recorded) is not None:
            return False  # its stage's done.json names the file (`pipeline.read_done`)
    if stages is None:
        return True
    listed = marker.get("stages")
    return listed is not None and set(listed) == set(stages)


def _check_segment(segment: str) -> None:
    if not _SEGMENT_RE.fullmatch(segment):
        raise ValueError(
            f"invalid segment name {segment!r}: use letters, digits and _.=+- "
            "(not starting with '.')"
        )


def _infer_dtype(name: str, value: Any) -> pl.DataType:
    try:
        return pl.Series(name, [value], strict=True).dtype
    except Exception as e:
        raise ValueError(f"config column {name!r}: cannot store {value!r}: {e}") from e


def _column_names(rows: Sequence[Mapping[str, Any]] | pl.DataFrame) -> list[str]:
    if isinstance(rows, pl.DataFrame):
        return rows.columns
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return list(names)


def _cast(series: pl.Series, dtype: pl.DataType) -> pl.Series:
    """Strict cast that also refuses to truncate floats to integers."""
    if series.dtype == dtype:
        return series
    out = series.cast(dtype, strict=True)
    if series.dtype.is_float() and dtype.is_integer():
        finite = series.is_not_null() & series.is_finite()
        if not (out.filter(finite).cast(series.dtype) == series.filter(finite)).all():
            raise ValueError("non-integral float values")
    return out


def _series(table: str, name: str, values: Any, dtype: pl.DataType) -> pl.Series:
    """``values`` as a Series of ``dtype``; ValueError naming the column when impossible."""
    try:
        if isinstance(values, pl.Series):
            return _cast(values.alias(name), dtype)
        try:
            return pl.Series(name, values, dtype=dtype, strict=True)
        except TypeError:
            if dtype != pl.String():
                raise
            # e.g. ints in a String config column: build as inferred, then cast.
            return _cast(pl.Series(name, values, strict=True), dtype)
    except Exception as e:
        raise ValueError(
            f"table {table!r}: column {name!r} cannot be stored as {dtype}: {e}"
        ) from e


def _conform(
    rows: Sequence[Mapping[str, Any]] | pl.DataFrame,
    table: str,
    schema: Mapping[str, pl.DataType],
    trial_id: str,
) -> pl.DataFrame:
    """Validate columns against ``schema``, cast, and add missing columns as nulls."""
    names = _column_names(rows)
    unknown = [c for c in names if c not in schema]
    if unknown:
        raise ValueError(
            f"unknown column(s) {unknown} for table {table!r}; its columns are {list(schema)}"
        )
    values: dict[str, pl.Series | list[Any]]
    if isinstance(rows, pl.DataFrame):
        n_rows = rows.height
        values = {c: rows.get_column(c) for c in names}
    else:
        n_rows = len(rows)
        values = {c: [row.get(c) for row in rows] for c in names}
    if "trial_id" not in values:
        values["trial_id"] = [trial_id] * n_rows
    out = pl.DataFrame(
        [
            _series(table, name, values[name], dtype)
            if name in values
            else pl.Series(name, [None] * n_rows, dtype=dtype)
            for name, dtype in schema.items()
        ]
    )
    for name in REQUIRED[table]:
        if out.get_column(name).null_count():
            raise ValueError(f"table {table!r}: column {name!r} must not be null")
    return out

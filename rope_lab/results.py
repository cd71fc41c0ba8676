"""Results store of a sweep run directory: per-trial Parquet segments, markers and leases.

Layout of ``runs/SWEEP/``::

    trials/<trial_id>/config.yaml            written by the sweep driver
    trials/<trial_id>/checkpoints/           rope_lab.checkpoint
    trials/<trial_id>/<table>/<segment>.parquet
    trials/<trial_id>/_SUCCESS               trial finished (see mark_success)
    trials/<trial_id>/.lock                  TrialLease

Every segment file is written atomically (hidden temp file + ``os.replace``), so readers never
see a partial file, and writing a segment name again replaces it: a resumed trial rewrites its
segments instead of duplicating rows. ``load`` scans all segments of one or more run
directories lazily with the declared schemas.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import errno
import fcntl
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePath
from types import TracebackType
from typing import Any, Final, Literal, Self

import numpy as np
import polars as pl

from rope_lab.atomic import atomic_write

__all__ = [
    "EVAL_SCHEMA",
    "NTK_SCHEMA",
    "STATUSES",
    "TABLES",
    "TABLE_SCHEMAS",
    "TRAIN_SCHEMA",
    "TRIALS_SCHEMA",
    "Results",
    "TrialLease",
    "append_rows",
    "config_schema",
    "flatten_config",
    "is_finished",
    "load",
    "mark_success",
    "read_trial_table",
    "trial_dir",
    "write_trial_row",
]

TABLES: Final = ("trials", "train", "eval", "ntk")
STATUSES: Final = ("done", "failed", "diverged", "running")
SUCCESS_MARKER: Final = "_SUCCESS"
LOCK_FILE: Final = ".lock"
TRIAL_SEGMENT: Final = "trial"

TRAIN_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "loss": pl.Float64(),
        "grad_norm": pl.Float64(),
        "lr": pl.Float64(),
        "tokens_per_s": pl.Float64(),
    }
)

EVAL_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "method": pl.String(),  # RoPE scaling kind, or "none"
        "factor": pl.Float64(),
        "finetune_steps": pl.Int64(),
        "length": pl.Int64(),
        "loss": pl.Float64(),
        "perplexity": pl.Float64(),
        "accuracy": pl.Float64(),
        "exact_match": pl.Float64(),
        "position_bucket": pl.Int64(),  # null: whole sequence; else bucket start position
    }
)

NTK_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "probe_length": pl.Int64(),
        "group": pl.String(),  # parameter group, or "total"
        "metric": pl.String(),
        "value": pl.Float64(),
        "method": pl.String(),  # RoPE scaling the kernel was measured under ("none": as trained)
        "factor": pl.Float64(),
    }
)

# Fixed columns of the trials table; the flattened trial config is appended (config_schema).
TRIALS_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "sweep": pl.String(),
        "status": pl.String(),  # one of STATUSES
        "error": pl.String(),  # traceback, or null
        "wall_time_s": pl.Float64(),
        "n_params": pl.Int64(),
        "tokens_seen": pl.Int64(),
        "started_at": pl.Datetime("us", "UTC"),
        "finished_at": pl.Datetime("us", "UTC"),
    }
)

TABLE_SCHEMAS: Final[Mapping[str, pl.Schema]] = types.MappingProxyType(
    {"trials": TRIALS_SCHEMA, "train": TRAIN_SCHEMA, "eval": EVAL_SCHEMA, "ntk": NTK_SCHEMA}
)

# Columns that must be present and non-null in every row.
_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = types.MappingProxyType(
    {
        "trials": ("trial_id", "status"),
        "train": ("trial_id", "step"),
        "eval": ("trial_id", "step"),
        "ntk": ("trial_id", "step"),
    }
)

_SEGMENT_RE = re.compile(r"[A-Za-z0-9_=+\-][A-Za-z0-9_.=+\-]*")


# --------------------------------------------------------------------------------------------
# Config flattening


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError) as e:
        hints = {f.name: f.type for f in dataclasses.fields(cls)}
        unresolved = [name for name, hint in hints.items() if isinstance(hint, str)]
        if unresolved:
            raise TypeError(
                f"cannot resolve type hints of {cls.__qualname__} fields {unresolved}: {e}"
            ) from e
        return hints


def _strip_optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _nested_dataclass(hint: Any) -> type | None:
    hint = _strip_optional(hint)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


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
    """Column dtype of a (non-dataclass) field type hint; JSON strings for anything else."""
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


def config_schema(cls: type, *, prefix: str = "") -> dict[str, pl.DataType]:
    """Flattened column dtypes of the (frozen) dataclass ``cls``, from its type hints.

    ``int`` -> Int64, ``float`` -> Float64, ``str``/``Path`` -> String, ``bool`` -> Boolean,
    Enum/Literal -> dtype of their values, ``tuple[int, ...]``/``list[float]`` -> List(...),
    ``X | None`` -> X (all columns are nullable), nested dataclasses -> flattened with ``"."``
    joined names, anything else (dicts, heterogeneous tuples, ...) -> String (JSON).
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"config_schema expects a dataclass type, got {cls!r}")
    hints = _type_hints(cls)
    schema: dict[str, pl.DataType] = {}
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        nested = _nested_dataclass(hints[f.name])
        if "registry" in f.metadata:  # a variant field: every registered variant's columns
            for variant_name, variant in f.metadata["registry"].items():
                schema.update(config_schema(variant, prefix=f"{prefix}{variant_name}."))
        elif nested is not None:
            schema.update(config_schema(nested, prefix=f"{name}."))
        else:
            schema[name] = _hint_dtype(hints[f.name])
    return schema


_schema_of = config_schema  # write_trial_row has a parameter of that name


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
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


def flatten_config(cfg: Any, *, prefix: str = "") -> dict[str, Any]:
    """Flatten a (nested, frozen) dataclass instance into ``{"model.width": 256, ...}``.

    Nested dataclasses are walked with ``dataclasses.fields`` and their names joined by ``"."``;
    tuples/lists of scalars become lists (polars List columns), other containers JSON strings;
    a ``None`` nested config becomes nulls for all of its columns. Values agree with
    :func:`config_schema` of the class. A plain mapping is accepted at the top level.
    """
    out: dict[str, Any] = {}
    if isinstance(cfg, Mapping):
        for key, value in cfg.items():
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                out.update(flatten_config(value, prefix=f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = _scalarize(value)
        return out
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"flatten_config expects a dataclass instance, got {type(cfg)!r}")
    hints = _type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        name = f"{prefix}{f.name}"
        value = getattr(cfg, f.name)
        hint = hints.get(f.name, Any)
        if "registry" in f.metadata:  # a variant field: the chosen variant, under its name
            prefix_of_variant = f"{prefix}{getattr(cfg, f.metadata['tag'])}."
            out.update(flatten_config(value, prefix=prefix_of_variant))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flatten_config(value, prefix=f"{name}."))
        elif value is None and (nested := _nested_dataclass(hint)) is not None:
            out.update(dict.fromkeys(config_schema(nested, prefix=f"{name}.")))
        elif isinstance(value, tuple | list | set | frozenset) and _hint_dtype(hint) == pl.String():
            out[name] = _to_json(value)  # declared as a JSON column (e.g. a bare `tuple` hint)
        else:
            out[name] = _scalarize(value)
    return out


# --------------------------------------------------------------------------------------------
# Writing


def trial_dir(run_dir: str | Path, trial_id: str) -> Path:
    """``<run_dir>/trials/<trial_id>``."""
    if not trial_id or "/" in trial_id or trial_id.startswith("."):
        raise ValueError(f"invalid trial id {trial_id!r}")
    return Path(run_dir) / "trials" / trial_id


def _check_segment(segment: str) -> None:
    if not _SEGMENT_RE.fullmatch(segment):
        raise ValueError(
            f"invalid segment name {segment!r}: use letters, digits and _.=+- "
            "(not starting with '.')"
        )


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
    columns: dict[str, pl.Series | list[Any]]
    if isinstance(rows, pl.DataFrame):
        n_rows = rows.height
        columns = {c: rows.get_column(c) for c in names}
    else:
        n_rows = len(rows)
        columns = {c: [row.get(c) for row in rows] for c in names}
    if "trial_id" not in columns:
        columns["trial_id"] = [trial_id] * n_rows
    out = pl.DataFrame(
        [
            _series(table, name, columns[name], dtype)
            if name in columns
            else pl.Series(name, [None] * n_rows, dtype=dtype)
            for name, dtype in schema.items()
        ]
    )
    for name in _REQUIRED[table]:
        if out.get_column(name).null_count():
            raise ValueError(f"table {table!r}: column {name!r} must not be null")
    return out


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
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables are {list(TABLES)}")
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


def _infer_dtype(name: str, value: Any) -> pl.DataType:
    try:
        return pl.Series(name, [value], strict=True).dtype
    except Exception as e:
        raise ValueError(f"config column {name!r}: cannot store {value!r}: {e}") from e


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
            config_schema = _schema_of(type(config_columns))
        config_columns = flatten_config(config_columns)
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


def mark_success(trial_dir: str | Path) -> Path:
    """Atomically create ``<trial_dir>/_SUCCESS`` (holds the UTC completion time)."""
    stamp = json.dumps({"finished_at": dt.datetime.now(dt.UTC).isoformat()}).encode()
    return atomic_write(Path(trial_dir) / SUCCESS_MARKER, lambda f: f.write(stamp))


def is_finished(trial_dir: str | Path) -> bool:
    """Whether :func:`mark_success` has completed for this trial."""
    return (Path(trial_dir) / SUCCESS_MARKER).is_file()


class TrialLease:
    """Exclusive, non-blocking lock on a trial folder (``flock`` on ``<trial_dir>/.lock``).

    Use as ``with TrialLease(d) as lease: if lease.held: ...`` or call :meth:`acquire` (False
    when another holder, in this or another process, has it). The kernel releases the lock
    when the holder closes it, exits or is killed. A process forked while holding the lease
    shares it until both have closed it. ``flock`` is local to one host on some network file
    systems (NFS setups vary); use one host per run directory or a lock-aware file system.
    """

    def __init__(self, trial_dir: str | Path) -> None:
        self.trial_dir = Path(trial_dir)
        self.path = self.trial_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Try to take the lease without waiting; True if held (already or now)."""
        if self._fd is not None:
            return True
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._fd = fd
        # Informational only: who holds it.
        info = f"{os.uname().nodename} {os.getpid()} {dt.datetime.now(dt.UTC).isoformat()}\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
        except OSError:
            pass
        return True

    def release(self) -> None:
        """Give the lease up (no-op when not held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.release()


# --------------------------------------------------------------------------------------------
# Reading


@dataclasses.dataclass(frozen=True, eq=False)
class Results:
    """Lazy tables of one or more run directories."""

    trials: pl.LazyFrame
    train: pl.LazyFrame
    eval: pl.LazyFrame
    ntk: pl.LazyFrame
    run_dirs: tuple[Path, ...] = ()

    def table(self, name: str) -> pl.LazyFrame:
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; tables are {list(TABLES)}")
        return getattr(self, name)

    def with_config(self, table: str) -> pl.LazyFrame:
        """``table`` left-joined with the trials table on ``trial_id``.

        Clashing trials/config column names get the suffix ``"_trial"``. Raises at collect time
        when a trial_id appears in more than one trials row (e.g. the same id in two runs).
        """
        return self.table(table).join(
            self.trials, on="trial_id", how="left", validate="m:1", suffix="_trial"
        )

    @property
    def eval_with_config(self) -> pl.LazyFrame:
        """Eval rows with their trial's status and config columns."""
        return self.with_config("eval")


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


def _segment_files(run_dirs: Sequence[Path], table: str) -> list[str]:
    files: list[str] = []
    for run in run_dirs:
        root = run / "trials"
        if root.is_dir():
            files.extend(
                str(p) for p in sorted(root.glob(f"*/{table}/*.parquet")) if _visible(p, root)
            )
    return files


def _scan_declared(files: list[str], schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    if not files:
        return pl.LazyFrame(schema=dict(schema))
    return pl.scan_parquet(
        files,
        schema=dict(schema),
        missing_columns="insert",
        extra_columns="ignore",
        hidden_file_prefix=".",
    )


def _scan_trials(files: list[str], declared: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """Trials table: declared columns with declared dtypes, plus any other column found.

    Files are grouped by their Parquet schema; each group is one scan cast to the union
    schema (declared dtypes first, polars supertypes for undeclared columns).
    """
    if not files:
        return pl.LazyFrame(schema=dict(declared))
    groups: dict[tuple[tuple[str, pl.DataType], ...], list[str]] = {}
    for f in files:
        groups.setdefault(tuple(pl.read_parquet_schema(f).items()), []).append(f)
    found = pl.concat(
        [pl.DataFrame(schema=dict(key)) for key in groups], how="diagonal_relaxed"
    ).schema
    target = dict(declared)
    for name, dtype in found.items():
        target.setdefault(name, dtype)
    frames = []
    for key, group in groups.items():
        present = dict(key)
        exprs = [
            pl.col(name).cast(dtype) if name in present else pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in target.items()
        ]
        frames.append(pl.scan_parquet(group, hidden_file_prefix=".").select(exprs))
    return pl.concat(frames, how="vertical")


def _as_paths(run_dirs: str | Path | Sequence[str | Path]) -> tuple[Path, ...]:
    if isinstance(run_dirs, str | os.PathLike):
        return (Path(run_dirs),)
    return tuple(Path(r) for r in run_dirs)


def load(
    run_dirs: str | Path | Sequence[str | Path],
    *,
    config_schema: Mapping[str, pl.DataType] | None = None,
) -> Results:
    """Lazily scan all tables of one or more run directories.

    train/eval/ntk use their declared schemas: columns missing from older files read as null,
    unknown extra columns are ignored. trials has TRIALS_SCHEMA, then the ``config_schema``
    columns (e.g. ``config_schema(TrialConfig)``) with those dtypes, then any other column
    present in some file. Hidden files (temp files of in-flight writes) are skipped. The file
    list is fixed when ``load`` is called.
    """
    runs = _as_paths(run_dirs)
    declared_trials = dict(TRIALS_SCHEMA)
    for name, dtype in (config_schema or {}).items():
        declared_trials.setdefault(name, dtype)
    return Results(
        trials=_scan_trials(_segment_files(runs, "trials"), declared_trials),
        train=_scan_declared(_segment_files(runs, "train"), TRAIN_SCHEMA),
        eval=_scan_declared(_segment_files(runs, "eval"), EVAL_SCHEMA),
        ntk=_scan_declared(_segment_files(runs, "ntk"), NTK_SCHEMA),
        run_dirs=runs,
    )


def read_trial_table(trial_dir: str | Path, table: str) -> pl.DataFrame:
    """All segments of one trial's ``table`` (declared schema; empty frame when none)."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables are {list(TABLES)}")
    root = Path(trial_dir) / table
    files = [str(p) for p in sorted(root.glob("*.parquet")) if not p.name.startswith(".")]
    if table == "trials":
        return _scan_trials(files, TRIALS_SCHEMA).collect()
    return _scan_declared(files, TABLE_SCHEMAS[table]).collect()

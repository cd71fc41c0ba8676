"""Reading the results store: lazy scans of every segment of one or more run directories.

Each table is scanned with its declared schema; hidden files (temp files of writes in
flight) are skipped. Every segment's Parquet footer is read when a run is loaded
(`rope_lab.runtime.checked_files.parquet_schema`), so a truncated segment is named then, in one
line, not by the scan that collects it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from rope_lab.results.schema import (
    FILLED,
    TABLE_SCHEMAS,
    TRIALS_SCHEMA,
    check_table,
)
from rope_lab.runtime.checked_files import CorruptFile, parquet_schema, rerun_hint
from rope_lab.typed import ConfigError


@dataclasses.dataclass(frozen=True, eq=False)
class Results:
    """Lazy tables of one or more run directories."""

    trials: pl.LazyFrame
    train: pl.LazyFrame
    eval: pl.LazyFrame
    ntk: pl.LazyFrame
    run_dirs: tuple[Path, ...] = ()

    def table(self, name: str) -> pl.LazyFrame:
        """The lazy frame of table ``name`` (one of TABLES)."""
        check_table(name)
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


def _check_footer(segment: str) -> dict[str, pl.DataType]:
    """The segment's schema from its Parquet footer; CorruptFile naming it and how to
    recompute it (`checked_files.rerun_hint` of its trial) when the footer is unreadable."""
    try:
        return parquet_schema(segment, hint=None)
    except CorruptFile as err:
        raise CorruptFile(f"{err}; {rerun_hint(Path(segment).parent.parent)}") from None


def _scan_declared(files: list[str], table: str) -> pl.LazyFrame:
    """Segments of `table` with its declared schema, `FILLED` columns filled."""
    schema = TABLE_SCHEMAS[table]
    if not files:
        return pl.LazyFrame(schema=dict(schema))
    for f in files:
        _check_footer(f)
    scan = pl.scan_parquet(
        files,
        schema=dict(schema),
        missing_columns="insert",
        extra_columns="ignore",
        hidden_file_prefix=".",
    )
    filled = FILLED.get(table, {})
    return scan.with_columns(pl.col(c).fill_null(v) for c, v in filled.items()) if filled else scan


def _scan_trials(files: list[str], declared: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """Trials table: declared columns with declared dtypes, plus any other column found.

    Files are grouped by their Parquet schema; each group is one scan cast to the union
    schema (declared dtypes first, polars supertypes for undeclared columns).
    """
    if not files:
        return pl.LazyFrame(schema=dict(declared))
    groups: dict[tuple[tuple[str, pl.DataType], ...], list[str]] = {}
    for f in files:
        groups.setdefault(tuple(_check_footer(f).items()), []).append(f)
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


class RunDirError(ConfigError):
    """A path given to `load` that is neither a run directory nor a folder of run directories
    (a ConfigError: `rope-lab` prints it as one line)."""


def _as_paths(run_dirs: str | Path | Sequence[str | Path]) -> tuple[Path, ...]:
    if isinstance(run_dirs, str | os.PathLike):
        return (Path(run_dirs),)
    return tuple(Path(r) for r in run_dirs)


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` is a run directory: it holds a ``trials/`` folder."""
    return (Path(path) / "trials").is_dir()


def run_directories(paths: str | Path | Sequence[str | Path]) -> tuple[Path, ...]:
    """The run directories named by ``paths``, in order: a run directory (it holds
    ``trials/``) as it is, a parent folder (e.g. the ``--out`` of `rope-lab sweep run`) as
    every child run directory in name order. RunDirError naming what was found otherwise."""
    out: list[Path] = []
    for path in _as_paths(paths):
        if is_run_dir(path):
            out.append(path)
            continue
        if not path.is_dir():
            what = "a file" if path.exists() else "no such directory"
            raise RunDirError(f"not a run directory ({what}): {path}")
        children = sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p))
        if not children:
            found = sorted(
                p.name + ("/" if p.is_dir() else "")
                for p in path.iterdir()
                if not p.name.startswith(".")
            )
            listing = ", ".join(found[:10]) + (", ..." if len(found) > 10 else "")
            raise RunDirError(
                f"not a run directory (no trials/ folder) and no run directory inside it: "
                f"{path} holds {listing or 'nothing'}"
            )
        out.extend(children)
    return tuple(out)


def load(
    run_dirs: str | Path | Sequence[str | Path],
    *,
    config_schema: Mapping[str, pl.DataType] | None = None,
) -> Results:
    """Lazily scan all tables of one or more run directories.

    Each path is a run directory (it holds ``trials/``, e.g. ``runs/smoke``) or a folder of
    run directories (e.g. ``runs``: every child with a ``trials/`` folder is loaded); anything
    else raises RunDirError (a ValueError) naming what the path holds (`run_directories`); a
    segment whose Parquet footer cannot be read raises CorruptFile naming it.
    train/eval/ntk use their declared schemas: columns missing from older files read as null
    (or as their `FILLED` value: an old run's ntk rows have kernel "ntk"), unknown extra
    columns are ignored. trials has TRIALS_SCHEMA, then the ``config_schema``
    columns (e.g. ``config_schema(TrialConfig)``) with those dtypes, then any other column
    present in some file. Hidden files (temp files of in-flight writes) are skipped. The file
    list is fixed when ``load`` is called.
    """
    runs = run_directories(run_dirs)
    declared_trials = dict(TRIALS_SCHEMA)
    for name, dtype in (config_schema or {}).items():
        declared_trials.setdefault(name, dtype)
    return Results(
        trials=_scan_trials(_segment_files(runs, "trials"), declared_trials),
        train=_scan_declared(_segment_files(runs, "train"), "train"),
        eval=_scan_declared(_segment_files(runs, "eval"), "eval"),
        ntk=_scan_declared(_segment_files(runs, "ntk"), "ntk"),
        run_dirs=runs,
    )


def read_trial_table(trial_dir: str | Path, table: str) -> pl.DataFrame:
    """All segments of one trial's ``table`` (declared schema; empty frame when none)."""
    check_table(table)
    root = Path(trial_dir) / table
    files = [str(p) for p in sorted(root.glob("*.parquet")) if not p.name.startswith(".")]
    if table == "trials":
        return _scan_trials(files, TRIALS_SCHEMA).collect()
    return _scan_declared(files, table).collect()

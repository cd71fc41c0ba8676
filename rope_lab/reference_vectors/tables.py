"""The registry of reference tables: a table is one function registered with `@table(name,
description, columns)` that takes the `Vectors` and returns a polars DataFrame with exactly
those columns; `folder.write` writes every entry of `TABLES` (in registration order) and the
README describes it from there. `PLANNED` names tables not written yet; the README lists them
as not yet present until a table of that name is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from rope_lab.reference_vectors.vectors import Vectors


@dataclass(frozen=True)
class Table:
    """One Parquet file: `build(vectors)` returns its rows with exactly `columns`."""

    name: str
    description: str
    columns: dict[str, str]
    build: Callable[[Vectors], pl.DataFrame]

    @property
    def file(self) -> str:
        return f"{self.name}.parquet"


TABLES: dict[str, Table] = {}
# tables someone will add, named in the README as not yet present until registered
PLANNED: dict[str, str] = {}


def table(
    name: str, description: str, columns: dict[str, str]
) -> Callable[[Callable[[Vectors], pl.DataFrame]], Callable[[Vectors], pl.DataFrame]]:
    """Register a table builder `f(vectors) -> DataFrame` as `name.parquet`."""

    def add(build: Callable[[Vectors], pl.DataFrame]) -> Callable[[Vectors], pl.DataFrame]:
        if name in TABLES:
            raise ValueError(f"reference table {name!r} is registered twice")
        TABLES[name] = Table(name, description, columns, build)
        return build

    return add

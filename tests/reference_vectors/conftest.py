"""A reference-vector folder written once per test session (every method but the position
remaps), and readers of its tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rope_lab import reference_vectors as rv
from rope_lab.registry import SCALINGS


def frequency_methods() -> tuple[str, ...]:
    """Every registered method but the position remaps (which keep direct RoPE's frequencies
    and compile a program of their own each: the slow test writes them)."""
    return tuple(n for n in SCALINGS.names() if not getattr(SCALINGS[n], "remaps", False))


@pytest.fixture(scope="session")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rv") / "vectors"
    return rv.write(out, methods=frequency_methods())


def read_table(folder: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(folder / f"{name}.parquet")


def inv_freqs(folder: Path) -> dict[str, np.ndarray]:
    inv = read_table(folder, "inv_freq").sort("case_id", "index")
    return {k[0]: g["inv_freq"].to_numpy() for k, g in inv.group_by("case_id", maintain_order=True)}

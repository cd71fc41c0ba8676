"""The `position_remaps` table: for each relative-position remap case (ReRoPE, Leaky ReRoPE,
Self-Extend, Dual Chunk Attention, STRING) and each causal pair of chosen positions (the
remap's window / chunk / shift edges among them), the position set the pair is scored in and
the positions its query and key are rotated at.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import polars as pl

from rope_lab.model.rope import scaling_config
from rope_lab.model.scalings.remaps import Remap
from rope_lab.reference_vectors.grid import Case
from rope_lab.reference_vectors.tables import table
from rope_lab.reference_vectors.vectors import Vectors
from rope_lab.registry import SCALINGS


def remap_positions(case: Case) -> tuple[int, ...]:
    """Positions whose pairs `position_remaps` lists: 0, 1, every window / chunk / shift edge
    of the resolved remap (-1, 0, +1), L - 1, L, 2L and 4L - 1, sorted and distinct."""
    sets = remap_rule(case)
    L = case.original_length
    edges = [v for v in dataclasses.asdict(sets).values() if isinstance(v, int) and v > 0]
    if hasattr(sets, "chunk"):
        edges += [sets.chunk, 2 * sets.chunk, 3 * sets.chunk]
    near = {e + d for e in edges for d in (-1, 0, 1)}
    return tuple(sorted(p for p in {0, 1, L - 1, L, 2 * L, 4 * L - 1} | near if p >= 0))


def remap_rule(case: Case) -> Any:
    """The resolved position sets of a remap case (`Remap.rule`)."""
    method = scaling_config(case.method, **case.params)
    assert isinstance(method, Remap)
    return method.rule(case.factor, case.original_length)


@table(
    "position_remaps",
    "The relative-position remaps (ReRoPE, Leaky ReRoPE, Self-Extend, Dual Chunk Attention, "
    "STRING): for each remap case and each causal pair of chosen positions (0, 1, L - 1, L, "
    "2L, 4L - 1 and the remap's window / chunk / shift edges +-1), the position set it is "
    "scored in and the positions its query and key are rotated at. The logit of the pair is "
    "RoPE's at relative position query_rotation - key_rotation, with the case's frequencies "
    "(a remap keeps the model's: inv_freq.parquet has direct RoPE's). Rows only for methods "
    "that remap.",
    {
        "case_id": "string; cases.parquet's key",
        "method": "string; the remap",
        "resolved": "string, JSON; the remap's parameters with its defaults resolved from "
        "original_length (e.g. ReRoPE's window L / 2)",
        "query_position": "int64; the query's position i",
        "key_position": "int64; the key's position j <= i",
        "position_set": "int64; the set the pair is scored in (0: exact positions)",
        "query_rotation": "float32; the position the query is rotated at in that set",
        "key_rotation": "float32; the position the key is rotated at in that set",
        "relative": "float64; query_rotation - key_rotation, the relative position the pair "
        "sees (the papers' definition, tests/model/scalings/test_remaps.py)",
    },
)
def _position_remaps(v: Vectors) -> pl.DataFrame:
    parts = []
    for c in v.cases:
        if c.group != "grid" or not SCALINGS[c.method].remaps:
            continue
        sets = remap_rule(c)
        pos = np.asarray(remap_positions(c), dtype=np.int64)
        i, j = np.tril_indices(len(pos))
        chosen = np.asarray(sets.choice(pos, pos))[i, j]
        qs = np.stack(sets.query_positions(pos)).astype(np.float32)
        ks = np.stack(sets.key_positions(pos)).astype(np.float32)
        q_rot, k_rot = qs[chosen, i], ks[chosen, j]
        parts.append(
            pl.DataFrame(
                {
                    "case_id": [c.case_id] * len(i),
                    "method": [c.method] * len(i),
                    "resolved": [json.dumps(dataclasses.asdict(sets), sort_keys=True)] * len(i),
                    "query_position": pos[i],
                    "key_position": pos[j],
                    "position_set": chosen.astype(np.int64),
                    "query_rotation": q_rot,
                    "key_rotation": k_rot,
                    "relative": q_rot.astype(np.float64) - k_rot.astype(np.float64),
                }
            )
        )
    schema = {
        "case_id": pl.String, "method": pl.String, "resolved": pl.String,
        "query_position": pl.Int64, "key_position": pl.Int64, "position_set": pl.Int64,
        "query_rotation": pl.Float32, "key_rotation": pl.Float32, "relative": pl.Float64,
    }  # fmt: skip
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)

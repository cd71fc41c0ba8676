"""The `cases` table: one row per case (grid and tiny model), with the arguments of rope_lab's
`inv_freq`, the attention factor they give and the Hugging Face config fields that reproduce
them (or why Hugging Face has no form of the method). Every other table is keyed by its
`case_id`.
"""

from __future__ import annotations

import json

import polars as pl

from rope_lab.reference_vectors.grid import _plain
from rope_lab.reference_vectors.tables import table
from rope_lab.reference_vectors.vectors import Vectors


@table(
    "cases",
    "One row per case: the arguments of rope_lab's inv_freq, the attention factor it gives, "
    "and the Hugging Face config fields that reproduce it.",
    {
        "case_id": "string; the key of every other table (`METHOD-NNN` for the grid, "
        "`model-METHOD[-LSEQ]` for the tiny model's scaling)",
        "group": "string; `grid` (the parameter grid) or `model` (the scaling under which "
        "logits.parquet ran the tiny model)",
        "method": "string; rope_lab's scaling method (rope_lab.registry.SCALINGS)",
        "rotary_dim": "int64; rotated dims d of a head (d/2 frequencies)",
        "head_dim": "int64; the head's dims (> rotary_dim: partial rotary; HF's "
        "partial_rotary_factor = rotary_dim / head_dim)",
        "theta": "float64; the RoPE base (HF rope_theta)",
        "factor": "float64; the scaling factor s",
        "original_length": "int64; the training length L (HF: original_max_position_embeddings "
        "for yarn / llama3 / longrope, max_position_embeddings for dynamic; unused by methods "
        "that do not read it)",
        "seq_len": "int64, null when unset; the current length for a length-dependent method "
        "(HF: max position id + 1)",
        "params": "string, JSON; the method's own parameters as set (unset ones take the "
        "method's defaults)",
        "attention_factor": "float64; the factor cos and sin are multiplied by "
        "(HF attention_scaling)",
        "hf_config": "string, JSON, null where HF has no form: {head_dim, "
        "max_position_embeddings, rope_parameters} of a transformers 5.x config that gives "
        "the same frequencies and attention factor",
        "not_in_hf": "string; why HF has no form of the method (empty when it has one)",
        "note": "string; what the case tests",
    },
)
def _cases(v: Vectors) -> pl.DataFrame:
    rows = []
    for c in v.cases:
        hf, why = c.hf()
        rows.append(
            {
                "case_id": c.case_id,
                "group": c.group,
                "method": c.method,
                "rotary_dim": c.rotary_dim,
                "head_dim": c.head_dim,
                "theta": c.theta,
                "factor": c.factor,
                "original_length": c.original_length,
                "seq_len": c.seq_len,
                "params": json.dumps(_plain(c.params), sort_keys=True),
                "attention_factor": v.frequencies(c)[1],
                "hf_config": None if hf is None else json.dumps(hf, sort_keys=True),
                "not_in_hf": why,
                "note": c.note,
            }
        )
    schema = {
        "case_id": pl.String, "group": pl.String, "method": pl.String, "rotary_dim": pl.Int64,
        "head_dim": pl.Int64, "theta": pl.Float64, "factor": pl.Float64,
        "original_length": pl.Int64, "seq_len": pl.Int64, "params": pl.String,
        "attention_factor": pl.Float64, "hf_config": pl.String, "not_in_hf": pl.String,
        "note": pl.String,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)

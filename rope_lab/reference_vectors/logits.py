"""The `logits` table: the tiny model's logits under each method's `model` case, one row per
(case, forward length, position), for checking another engine's forward of the saved
checkpoint (`DIR/model`) under the case's scaling.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rope_lab.reference_vectors.parameters import LOGIT_LENGTHS
from rope_lab.reference_vectors.tables import table
from rope_lab.reference_vectors.vectors import Vectors, logits_under


@table(
    "logits",
    "The tiny model's logits (DIR/model: a Llama checkpoint, rope_theta 10000, training "
    "length 32) under each method's `model` case, one row per (case, forward length, "
    "position). A forward of length L reads the first L tokens of the same sequence at "
    "positions 0 .. L-1; a length-dependent method is taken at seq_len = L (its case has that "
    "seq_len). Reproduce with DIR/model/config.json's rope_parameters replaced by the case's "
    "hf_config (where HF has the method).",
    {
        "case_id": "string; cases.parquet's key (group `model`)",
        "method": "string; the scaling method",
        "length": "int64; the forward's length L",
        "position": "int64; the position 0 .. L-1",
        "token": "int64; the input token at that position",
        "logits": "list[float32] of vocab size (64); the model's output at that position",
    },
)
def _logits(v: Vectors) -> pl.DataFrame:
    parts = []
    for c in v.cases:
        if c.group != "model":
            continue
        lengths = LOGIT_LENGTHS if c.seq_len is None else (c.seq_len,)
        for length in lengths:
            tokens = v.tokens[:length]
            out = logits_under(v.model, c, tokens)
            parts.append(
                pl.DataFrame(
                    {
                        "case_id": [c.case_id] * length,
                        "method": [c.method] * length,
                        "length": np.full(length, length, dtype=np.int64),
                        "position": np.arange(length, dtype=np.int64),
                        "token": tokens.astype(np.int64),
                        "logits": out,
                    },
                    schema_overrides={"logits": pl.List(pl.Float32)},
                )
            )
    return pl.concat(parts)

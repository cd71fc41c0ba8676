"""The `inv_freq` table: the inverse frequencies of every case, one row per frequency, with
the float32 exponent 2i/d they are formed from (Hugging Face's half-split layout: dims i and
i + rotary_dim/2 form a pair).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rope_lab.reference_vectors.tables import table
from rope_lab.reference_vectors.vectors import Vectors


@table(
    "inv_freq",
    "The inverse frequencies of every case, one row per frequency.",
    {
        "case_id": "string; cases.parquet's key",
        "index": "int64; i in 0 .. rotary_dim/2 - 1 (dims i and i + rotary_dim/2 form a pair, "
        "HF's half-split layout)",
        "exponent": "float32; 2i / d formed in float32 (HF's torch.arange(0, d, 2).float() / d), "
        "the base's exponent of the unscaled frequency theta ** -(2i/d)",
        "inv_freq": "float32; the frequency in radians per position (0 where a method rotates "
        "nothing: proportional's unrotated pairs)",
    },
)
def _inv_freq(v: Vectors) -> pl.DataFrame:
    ids, index, exponent, inv = [], [], [], []
    for c in v.cases:
        freq = v.frequencies(c)[0]
        half = len(freq)
        ids += [c.case_id] * half
        index.append(np.arange(half))
        exponent.append(np.arange(0, c.rotary_dim, 2, dtype=np.float32) / np.float32(c.rotary_dim))
        inv.append(freq)
    return pl.DataFrame(
        {
            "case_id": ids,
            "index": np.concatenate(index).astype(np.int64),
            "exponent": np.concatenate(exponent).astype(np.float32),
            "inv_freq": np.concatenate(inv).astype(np.float32),
        }
    )

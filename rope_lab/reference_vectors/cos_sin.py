"""The `cos_sin` table: cos and sin of every case at `POSITIONS` plus its own L - 1, L and
s x L - 1, under the float32 convention Hugging Face and rope_lab share (float32(position) x
inv_freq rounded once), beside the exact float64 product, the gap a float32 engine cannot
avoid.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rope_lab.reference_vectors.grid import Case
from rope_lab.reference_vectors.parameters import LOGIT_LENGTHS, POSITIONS
from rope_lab.reference_vectors.tables import table
from rope_lab.reference_vectors.vectors import Vectors


def case_positions(case: Case) -> tuple[int, ...]:
    """`POSITIONS` plus the case's L - 1, L and s x L - 1 (sorted, distinct)."""
    beyond = max(1, round(case.factor * case.original_length))
    extra = (case.original_length - 1, case.original_length, beyond - 1)
    return tuple(sorted(set(POSITIONS) | {p for p in extra if p >= 0}))


@table(
    "cos_sin",
    "cos and sin at chosen positions (POSITIONS in manifest.json, plus each case's L - 1, L "
    "and s x L - 1), one row per (case, position, frequency). Convention (HF's and rope_lab's): "
    "the angle is float32(position) x inv_freq rounded once to float32 (a float32 multiply; "
    "a position above 2^24 is itself rounded to float32 first, as HF's position_ids.float()); "
    "cos and sin are of that float32 angle, here correctly rounded from float64 (torch's "
    "float32 cos / sin may differ by 1 ulp). They are NOT multiplied by the attention factor: "
    "HF's cos / sin tensors are these times cases.attention_factor (in float32). The _exact "
    "columns are of the exact product, the gap a float32 engine cannot avoid.",
    {
        "case_id": "string; cases.parquet's key",
        "position": "int64; the token position",
        "index": "int64; the frequency index i (dims i and i + rotary_dim/2)",
        "angle": "float32; float32(position) * inv_freq, a float32 multiply",
        "cos": "float32; cos(angle)",
        "sin": "float32; sin(angle)",
        "angle_exact": "float64; position * inv_freq, exact (the integer position times the "
        "float32 frequency)",
        "cos_exact": "float64; cos(angle_exact)",
        "sin_exact": "float64; sin(angle_exact)",
    },
)
def _cos_sin(v: Vectors) -> pl.DataFrame:
    parts = []
    for c in v.cases:
        if c.group == "model" and c.seq_len is not None and c.seq_len != max(LOGIT_LENGTHS):
            continue  # one length of a length-dependent model scaling is enough here
        inv = v.frequencies(c)[0]
        pos = np.asarray(case_positions(c), dtype=np.int64)
        angle = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float32)
        exact = pos.astype(np.float64)[:, None] * inv.astype(np.float64)[None, :]
        a64 = angle.astype(np.float64)
        n, half = angle.shape
        parts.append(
            pl.DataFrame(
                {
                    "case_id": [c.case_id] * (n * half),
                    "position": np.repeat(pos, half),
                    "index": np.tile(np.arange(half, dtype=np.int64), n),
                    "angle": angle.ravel(),
                    "cos": np.cos(a64).astype(np.float32).ravel(),
                    "sin": np.sin(a64).astype(np.float32).ravel(),
                    "angle_exact": exact.ravel(),
                    "cos_exact": np.cos(exact).ravel(),
                    "sin_exact": np.sin(exact).ravel(),
                }
            )
        )
    return pl.concat(parts)

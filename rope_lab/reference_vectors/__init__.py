"""Reference vectors for other engines (`rope-lab reference-vectors --out DIR`).

For every registered RoPE scaling method (`rope_lab.registry.SCALINGS`) and a grid of
parameters that includes the edge cases engines get wrong, DIR receives Parquet tables of the
inverse frequencies, the attention factors, cos/sin at chosen positions (large ones included,
where float32 rounding of position x frequency differs between engines), and the logits of a
tiny deterministic Llama-shaped rope_lab Transformer under each method, whose weights are
saved as a Hugging Face checkpoint (`DIR/model`). `DIR/README.md` describes every file and
column; `DIR/manifest.json` holds the rope_lab version, the parameters and each file's rows
and SHA-256.

Modules: `parameters` (what the grid covers, plain data), `grid` (`Case`, `grid_cases`,
`model_cases`), `vectors` (`Vectors`: the cases, their frequencies, the tiny model;
`logits_under`), `tables` (the `@table` registry), one module per table (`cases`, `inv_freq`,
`cos_sin`, `logits`, `position_remaps`) and `folder` (`write`, `readme`). This package
re-exports their public names, so `rope_lab.reference_vectors.write` and the rest import from
here.
"""

from __future__ import annotations

# isort: off
# Import order is registration order, which is the order TABLES holds the tables in: the order
# `write` builds them and the README and manifest list them.
from rope_lab.reference_vectors import cases as cases
from rope_lab.reference_vectors import inv_freq as inv_freq
from rope_lab.reference_vectors.cos_sin import case_positions
from rope_lab.reference_vectors import logits as logits
from rope_lab.reference_vectors.position_remaps import remap_positions, remap_rule
# isort: on

from rope_lab.reference_vectors.folder import readme, write
from rope_lab.reference_vectors.grid import Case, grid_cases, model_cases
from rope_lab.reference_vectors.grid import _plain as _plain  # read by the tests
from rope_lab.reference_vectors.parameters import (
    BASE,
    FIELD_CASES,
    LOGIT_LENGTHS,
    MODEL,
    MODEL_FACTOR,
    MODEL_THETA,
    PARTIAL,
    POSITIONS,
    REQUIRED_EXAMPLES,
    SEED,
    TRAIN_LENGTH,
    VOCAB,
    EdgeCase,
)
from rope_lab.reference_vectors.tables import PLANNED, TABLES, Table, table
from rope_lab.reference_vectors.vectors import Vectors, logits_under

__all__ = [
    "BASE",
    "FIELD_CASES",
    "LOGIT_LENGTHS",
    "MODEL",
    "MODEL_FACTOR",
    "MODEL_THETA",
    "PARTIAL",
    "PLANNED",
    "POSITIONS",
    "REQUIRED_EXAMPLES",
    "SEED",
    "TABLES",
    "TRAIN_LENGTH",
    "VOCAB",
    "Case",
    "EdgeCase",
    "Table",
    "Vectors",
    "case_positions",
    "grid_cases",
    "logits_under",
    "model_cases",
    "readme",
    "remap_positions",
    "remap_rule",
    "table",
    "write",
]

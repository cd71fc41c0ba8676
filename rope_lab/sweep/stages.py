"""The stages a sweep worker runs: `rope_lab.pipeline`'s, under the names the sweep used.

`run_train_stage(config, run_dir)` and `run_scaling_stage(config, run_dir, method, factor)` take
plain data and import JAX only when they run; see `rope_lab.pipeline` for the files they write.
"""

from __future__ import annotations

from rope_lab.pipeline import (
    MODEL_FILE,
    STAGES_DIR,
    TRAIN_STAGE,
    compile_cache_dir,
    read_done,
    run_scaling_stage,
    run_train_stage,
    stage_dir,
    stage_name,
)

__all__ = [
    "MODEL_FILE",
    "STAGES_DIR",
    "TRAIN_STAGE",
    "compile_cache_dir",
    "read_done",
    "run_scaling_stage",
    "run_train_stage",
    "stage_dir",
    "stage_name",
]

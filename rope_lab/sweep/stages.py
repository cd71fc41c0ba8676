"""The stages a sweep worker runs: `rope_lab.trial.pipeline`'s, under the names the sweep used.

`run_stage(config, run_dir, name)` takes plain data and imports JAX only when it runs; the
stage names come from `rope_lab.trial.stage_plan.trial_stages`; see `rope_lab.trial.pipeline` for
the files
stages write.
"""

from __future__ import annotations

from rope_lab.trial.pipeline import (
    MODEL_FILE,
    STAGES_DIR,
    TRAIN_STAGE,
    compile_cache_dir,
    read_done,
    run_stage,
    run_train_stage,
    stage_dir,
)

__all__ = [
    "MODEL_FILE",
    "STAGES_DIR",
    "TRAIN_STAGE",
    "compile_cache_dir",
    "read_done",
    "run_stage",
    "run_train_stage",
    "stage_dir",
]

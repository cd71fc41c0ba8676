"""Results store of a sweep run directory: per-trial Parquet segments, markers and leases.

Layout of ``runs/SWEEP/``::

    trials/<trial_id>/config.yaml            written by the sweep driver
    trials/<trial_id>/checkpoints/           rope_lab.trial.checkpoint
    trials/<trial_id>/<table>/<segment>.parquet
    trials/<trial_id>/_SUCCESS               trial finished (see mark_success)
    trials/<trial_id>/.lock                  TrialLease

Modules: ``schema`` (tables, their columns and dtypes), ``columns`` (a config as trials-table
columns), ``store`` (atomic segment writes, the trial row, the success marker), ``lease``
(``TrialLease``), ``scan`` (``load``: lazy scans with the declared schemas, of run
directories or a folder of them).
"""

from rope_lab.results.columns import config_schema, flatten_config
from rope_lab.results.lease import TrialLease
from rope_lab.results.scan import (
    Results,
    RunDirError,
    is_run_dir,
    load,
    read_trial_table,
    run_directories,
)
from rope_lab.results.schema import (
    EVAL_SCHEMA,
    NTK_SCHEMA,
    STATUSES,
    TABLE_SCHEMAS,
    TABLES,
    TRAIN_SCHEMA,
    TRIALS_SCHEMA,
)
from rope_lab.results.store import (
    append_rows,
    is_finished,
    mark_success,
    trial_dir,
    write_trial_row,
)

__all__ = [
    "EVAL_SCHEMA",
    "NTK_SCHEMA",
    "STATUSES",
    "TABLES",
    "TABLE_SCHEMAS",
    "TRAIN_SCHEMA",
    "TRIALS_SCHEMA",
    "Results",
    "RunDirError",
    "TrialLease",
    "append_rows",
    "config_schema",
    "flatten_config",
    "is_finished",
    "is_run_dir",
    "load",
    "mark_success",
    "read_trial_table",
    "run_directories",
    "trial_dir",
    "write_trial_row",
]

# `rope_lab.load` names this package as its home (rope_lab.__init__, tests/test_public_api.py).
load.__module__ = __name__

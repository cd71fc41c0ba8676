"""Tables of the results store: names, declared column dtypes, required columns, statuses."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Final

import polars as pl

TABLES: Final = ("trials", "train", "eval", "ntk")
STATUSES: Final = ("done", "failed", "diverged", "running")
SUCCESS_MARKER: Final = "_SUCCESS"
LOCK_FILE: Final = ".lock"
TRIAL_SEGMENT: Final = "trial"

TRAIN_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "loss": pl.Float64(),
        "grad_norm": pl.Float64(),
        "lr": pl.Float64(),
        "tokens_per_s": pl.Float64(),
    }
)

EVAL_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "method": pl.String(),  # RoPE scaling kind, or "none"
        "factor": pl.Float64(),
        "finetune_steps": pl.Int64(),
        "length": pl.Int64(),
        "loss": pl.Float64(),
        "perplexity": pl.Float64(),
        "accuracy": pl.Float64(),
        "exact_match": pl.Float64(),
        "bits_per_byte": pl.Float64(),  # text tasks: loss x tokens / bytes / ln 2; else null
        "position_bucket": pl.Int64(),  # null: whole sequence; else bucket start position
        "sequences_per_forward": pl.Int64(),  # eval batch split to fit eval.memory_budget_mb
        "mode": pl.String(),  # null: teacher forced; "decode": answers generated (decode_eval)
        "protocol": pl.String(),  # decode rows: the cache protocol (kv_cache.PROTOCOLS)
        "depth": pl.Float64(),  # null; eval.depths: the needle's relative depth (whole rows)
        # mode "attention" rows (eval.attention_stats): the layer, the head (null: all heads)
        "layer": pl.Int64(),
        "head": pl.Int64(),
        "first_token_mass": pl.Float64(),  # attention weight on key 0, queries i >= 1
        "sink_mass": pl.Float64(),  # weight on the sink logit (sinks)
        "gate_mean": pl.Float64(),  # mean output gate sigmoid(x W_gate) (gated variants)
        "fox_window": pl.Float64(),  # 1 / -(mean log forget gate), tokens (fox, fox_pro)
    }
)

NTK_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "step": pl.Int64(),
        "probe_length": pl.Int64(),
        "group": pl.String(),  # parameter group, or "total"
        "metric": pl.String(),
        "value": pl.Float64(),
        "method": pl.String(),  # RoPE scaling the kernel was measured under ("none": as trained)
        "factor": pl.Float64(),
        "kernel": pl.String(),  # "ntk" (empirical NTK) or "nngp" (NNGP at initialisation)
    }
)

# Columns added after a table's first runs, with the value they mean in files written before
# them: loading fills their nulls with it (an old run's NTK rows are all of the NTK).
FILLED: Final[Mapping[str, Mapping[str, object]]] = types.MappingProxyType(
    {"ntk": {"kernel": "ntk"}}
)

# Fixed columns of the trials table; the flattened trial config is appended (config_schema).
TRIALS_SCHEMA: Final = pl.Schema(
    {
        "trial_id": pl.String(),
        "sweep": pl.String(),
        "status": pl.String(),  # one of STATUSES
        "error": pl.String(),  # traceback, or null
        "wall_time_s": pl.Float64(),
        "n_params": pl.Int64(),
        # less embedding, readout, learned position table; null in runs written before it
        "n_params_non_embedding": pl.Int64(),
        "tokens_seen": pl.Int64(),
        # a `train.match` trial's search (`rope_lab.trial.match`); null for every other trial
        "match_target": pl.Float64(),
        "match_loss": pl.Float64(),
        "match_lr": pl.Float64(),
        "match_steps": pl.Int64(),
        "match_reached": pl.Boolean(),
        "started_at": pl.Datetime("us", "UTC"),
        "finished_at": pl.Datetime("us", "UTC"),
    }
)

TABLE_SCHEMAS: Final[Mapping[str, pl.Schema]] = types.MappingProxyType(
    {"trials": TRIALS_SCHEMA, "train": TRAIN_SCHEMA, "eval": EVAL_SCHEMA, "ntk": NTK_SCHEMA}
)

# Columns that must be present and non-null in every row.
REQUIRED: Final[Mapping[str, tuple[str, ...]]] = types.MappingProxyType(
    {
        "trials": ("trial_id", "status"),
        "train": ("trial_id", "step"),
        "eval": ("trial_id", "step"),
        "ntk": ("trial_id", "step"),
    }
)


def check_table(table: str) -> None:
    """ValueError listing the tables unless `table` is one of TABLES."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables are {list(TABLES)}")

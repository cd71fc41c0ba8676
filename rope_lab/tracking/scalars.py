"""Tracker tags and values from a trial's rows (plain Python, no tracker imported): the train
row's scalars, the NTK rows', the evaluation rows' (one scalar per length), the config as
hyperparameters. The same names go to every tracker."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s")
EVAL_METRICS = ("loss", "accuracy", "bits_per_byte")


def train_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """`train/<key>` of one train-table row (`loss`, `lr`, `grad_norm`, `tokens_per_s`)."""
    return {f"train/{key}": float(row[key]) for key in TRAIN_KEYS if row.get(key) is not None}


def ntk_scalars(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """`ntk/<metric>/<group>/L<probe_length>` of the NTK rows of one step (an NNGP row's
    metric as `nngp_<metric>`; a row under a scaling adds `/<method>_x<factor>`)."""
    out = {}
    for r in rows:
        metric = r["metric"] if r.get("kernel", "ntk") == "ntk" else f"{r['kernel']}_{r['metric']}"
        tag = f"ntk/{metric}/{r['group']}/L{r['probe_length']}"
        if r.get("method", "none") != "none":
            tag += f"/{r['method']}_x{r['factor']:g}"
        out[tag] = float(r["value"])
    return out


def eval_scalars(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """`eval/<scaling>/<metric>/L<length>` of the whole-sequence eval rows (position buckets
    left out), `<scaling>` being `<method>_x<factor>` plus `_ft<steps>` when fine-tuned,
    `_<mode>-<protocol>` for decoded rows and `_depth<d>` for a needle depth; metrics that are
    null or nan are left out."""
    out = {}
    for r in rows:
        if r.get("position_bucket") is not None:
            continue
        scaling = f"{r['method']}_x{r['factor']:g}"
        if r.get("finetune_steps"):
            scaling += f"_ft{r['finetune_steps']}"
        if r.get("mode") is not None:
            scaling += f"_{r['mode']}-{r.get('protocol')}"
        if r.get("depth") is not None:
            scaling += f"_depth{r['depth']:g}"
        for metric in EVAL_METRICS:
            value = r.get(metric)
            if value is not None and math.isfinite(value):
                out[f"eval/{scaling}/{metric}/L{r['length']}"] = float(value)
    return out


def hyperparameters(flat: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """A flattened config (`results.columns.flatten_config`) as hyperparameters: nulls left out,
    lists and other values written as text."""
    out: dict[str, bool | int | float | str] = {}
    for key, value in flat.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, bool | int | float | str) else str(value)
    return out

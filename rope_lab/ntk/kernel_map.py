"""The tail kernel at initialisation, without training: one row per long probe length and kernel
for each trial of a sweep spec (`rope-lab kernel-map SPEC`), for the regime map of
`rope_lab.analysis.kernel_map`.

A point reuses the tracker (`rope_lab.ntk.tracking.NTKTracker`): the same probes (`ntk.seed`),
the same gradient pass at step 0 (`measure`) and the same NNGP (`nngp`, when
`ntk.nngp_samples` > 0); the shift-invariance pass, the position kernels, evaluation and the
optimiser are skipped, which is what makes a point cheap. Rows are wide: per (trial, probe
length, kernel) the NTK metrics `tail_cos_mean`, `head_cos_mean`, `k_cross_cos_mean` and, for
the NTK, `kernel_tail_collapse_target`: the kernel's predicted movement, tail over in range
(`rope_lab.ntk.predictions.movement_ratio` of `kernel_regression`), for a movement of the short
probes' outputs towards their targets (`rope_lab.ntk.probes.target_values`; the "random"
output only). At init no step has moved the outputs, so `kernel_tail_collapse` itself is
undefined (0 / 0); the target movement is the one training on the probes would start with.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rope_lab.config import TrialConfig
from rope_lab.model.factory import make_model
from rope_lab.ntk.predictions import kernel_regression, movement_ratio
from rope_lab.ntk.probes import target_values
from rope_lab.ntk.tracking import TOTAL, NTKTracker
from rope_lab.trial.train import make_task_from

MAP_METRICS = ("tail_cos_mean", "head_cos_mean", "k_cross_cos_mean")
COLLAPSE = "kernel_tail_collapse_target"


def trial_columns(cfg: TrialConfig) -> dict[str, Any]:
    """The map's axes of one trial: encoding, depth, width, parametrisation, seed, L_train,
    task, family and training regime."""
    return {
        "encoding": cfg.model.position.kind if cfg.model.family == "transformer" else "cnn",
        "depth": cfg.model.depth,
        "width": cfg.model.width,
        "parametrization": cfg.model.parametrization,
        "seed": cfg.train.seed,
        "train_length": cfg.train.length,
        "task": cfg.task.name,
    }


def target_collapse(
    kernels: dict[str, np.ndarray], y: np.ndarray | None, length: int, train_length: int, ridge
) -> float | None:
    """Kernel-predicted tail movement over in-range movement at one long `length` for a
    movement y (N,) of the short probes' outputs: kernel regression with the kernels-file
    entries "train/total" (N, N), "cross{L}/total" and "tail{L}/total" (M, N); None without
    y or where the in-range prediction is 0."""
    if y is None:
        return None
    K_train = kernels[f"train/{TOTAL}"]
    cross, tail = kernels[f"cross{length}/{TOTAL}"], kernels[f"tail{length}/{TOTAL}"]
    delta = np.asarray(y, np.float64)[:, None]
    moved_tail = kernel_regression(K_train, tail, delta, ridge)
    moved_head = kernel_regression(K_train, cross, delta, ridge) - moved_tail
    return movement_ratio(moved_head, moved_tail, (train_length, length - train_length))


def measure_at_init(cfg: TrialConfig) -> list[dict[str, Any]]:
    """Rows of one trial's tail kernel at initialisation: per long probe length (`ratio` =
    length / L_train) and kernel ("ntk", and "nngp" when `ntk.nngp_samples` > 0), the
    `MAP_METRICS` and (NTK) `COLLAPSE`, with `trial_columns` and the seconds each kernel took."""
    start = time.perf_counter()
    tracker = NTKTracker(cfg, make_task_from(cfg))
    ntk_rows = tracker.measure(make_model(cfg), 0)
    ntk_seconds = time.perf_counter() - start
    kernels = tracker.initial
    start = time.perf_counter()
    nngp_rows = tracker.nngp()
    nngp_seconds = time.perf_counter() - start
    y = target_values(cfg, tracker.probes, tracker.output)
    out = []
    for kernel, rows, seconds in (
        ("ntk", ntk_rows, ntk_seconds),
        ("nngp", nngp_rows, nngp_seconds),
    ):
        if not rows:
            continue
        for length in cfg.ntk_lengths:
            values = {
                r["metric"]: r["value"]
                for r in rows
                if r["probe_length"] == length and r["group"] == TOTAL
            }
            collapse = kernels if kernel == "ntk" else None
            out.append(map_row(cfg, kernel, length, values, collapse, y) | {"seconds": seconds})
    return out


def map_row(
    cfg: TrialConfig,
    kernel: str,
    length: int,
    values: dict[str, float],
    kernels: dict[str, np.ndarray] | None,
    y: np.ndarray | None,
) -> dict[str, Any]:
    """One map row of a trial at one long `length`: `trial_columns`, `kernel`, `probe_length`,
    `ratio` = length / L_train, the `MAP_METRICS` found in `values` (metric -> value; None
    where absent) and `COLLAPSE` from the kernels-file entries `kernels` (None without them)."""
    L = cfg.train.length
    row = {**trial_columns(cfg), "kernel": kernel, "probe_length": length, "ratio": length / L}
    row |= {m: values.get(m) for m in MAP_METRICS}
    collapse = None if kernels is None else target_collapse(kernels, y, length, L, cfg.ntk.ridge)
    return row | {COLLAPSE: collapse}


__all__ = [
    "COLLAPSE",
    "MAP_METRICS",
    "map_row",
    "measure_at_init",
    "target_collapse",
    "trial_columns",
]

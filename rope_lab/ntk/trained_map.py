"""The kernel map after training, read from a trained run (`rope-lab kernel-map --from-run`):
the rows of `rope_lab.ntk.kernel_map` built from the NTK rows the tracker wrote during
training, at step 0 (stage "init") and at the last tracked step or a chosen one ("trained").

The tracker's step-0 pass is the measurement `measure_at_init` makes (the same probes, model
and NNGP), so the "init" rows of a run are the map at initialisation of its trials; the
"trained" rows are the same metrics of the kernel at the later step (NTK only: the NNGP is a
kernel at initialisation). `kernel_tail_collapse_target` comes from the step's kernels file
(`ntk/kernels_<step>.npz`): kernel regression of the short probes' targets with that step's
kernel (None where the file is gone). Nothing is measured again: only the short probes'
targets are redrawn (`draw_probes` without the long sets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from rope_lab.config import ConfigError, TrialConfig, load_trial
from rope_lab.ntk.kernel_map import MAP_METRICS, map_row
from rope_lab.ntk.probes import draw_probes, readout, target_values
from rope_lab.ntk.tracking import TOTAL
from rope_lab.runtime.checked_files import read_npz

STAGES = ("init", "trained")


def _steps_text(steps: list[int]) -> str:
    return ", ".join(str(s) for s in steps)


def tracked_steps(ntk: pl.DataFrame) -> dict[str, list[int]]:
    """Per trial id, in id order, the sorted steps of its NTK rows (`kernel` "ntk") in an
    `ntk` table frame."""
    rows = ntk.filter(pl.col("kernel") == "ntk").select("trial_id", "step").unique()
    grouped = rows.group_by("trial_id").agg(pl.col("step").sort()).sort("trial_id")
    return dict(zip(grouped["trial_id"].to_list(), grouped["step"].to_list(), strict=True))


def stage_steps(run_dir: Path, steps: dict[str, list[int]], step: int | None) -> dict[str, int]:
    """Per trial, the step of its "trained" stage: `step`, or its last tracked step (None);
    ConfigError in one line naming the run, the trial and its tracked steps when the run has
    no NTK rows, a trial has none at step 0, or the step is not tracked / is step 0."""
    if not steps:
        raise ConfigError(f"{run_dir}: no NTK rows; train it with ntk.enabled and ntk.steps past 0")
    out = {}
    for trial, tracked in steps.items():
        where = f"{run_dir}: trial {trial} tracked the NTK at steps {_steps_text(tracked)}"
        if tracked[0] != 0:
            raise ConfigError(f"{where}; no step 0 to compare with")
        wanted = tracked[-1] if step is None else step
        if wanted == 0:
            raise ConfigError(f"{where}; no step after 0 to read as trained")
        if wanted not in tracked:
            raise ConfigError(f"{where}; step {wanted} is not tracked")
        out[trial] = wanted
    return out


def _trial_config(run_dir: Path, trial: str) -> TrialConfig:
    from rope_lab.trial.pipeline import CONFIG_FILE

    return load_trial(run_dir / "trials" / trial / CONFIG_FILE, saved=True)


def _targets(cfg: TrialConfig) -> np.ndarray | None:
    """The short probes' targets y (N,) of the tracker (None for "trace" and "target")."""
    output = readout(cfg)
    if isinstance(output, str):
        return None
    from rope_lab.trial.train import make_task_from

    return target_values(cfg, draw_probes(cfg, make_task_from(cfg), with_long=False), output)


def _kernels(folder: Path, step: int) -> dict[str, np.ndarray] | None:
    path = folder / "ntk" / f"kernels_{step:08d}.npz"
    return read_npz(path) if path.is_file() else None


def stage_rows(
    cfg: TrialConfig,
    rows: pl.DataFrame,
    kernels: dict[str, np.ndarray] | None,
    y: np.ndarray | None,
) -> list[dict[str, Any]]:
    """Map rows (`map_row`) of one trial at one step from its `ntk` table rows there (total
    group, as trained), NTK then NNGP, one per long probe length; `kernels`: that step's
    kernels file, for `COLLAPSE`. `seconds` is None: the tracker's time is not per kernel."""
    out = []
    for kernel in ("ntk", "nngp"):
        mine = rows.filter(pl.col("kernel") == kernel)
        if mine.is_empty():
            continue
        for length in cfg.ntk_lengths:
            at = mine.filter(pl.col("probe_length") == length)
            if at["metric"].n_unique() < at.height:  # one kernel per step: never two values
                raise ValueError(f"{cfg.trial_id}: two {kernel} rows of a metric at {length}")
            values = dict(zip(at["metric"].to_list(), at["value"].to_list(), strict=True))
            collapse = kernels if kernel == "ntk" else None
            out.append(map_row(cfg, kernel, length, values, collapse, y) | {"seconds": None})
    return out


def rows_from_run(run_dir: str | Path, step: int | None = None) -> list[dict[str, Any]]:
    """The kernel-map rows of every trial of one run directory with NTK rows: stage "init"
    (step 0) and "trained" (`step`, or each trial's last tracked step), with `trial_id`,
    `step` and `stage`; refusals as in `stage_steps`."""
    from rope_lab.results import load

    run = Path(run_dir)
    ntk = load(run).ntk.filter(
        (pl.col("group") == TOTAL)
        & (pl.col("method") == "none")
        & pl.col("metric").is_in(MAP_METRICS)
    )
    trained = stage_steps(run, tracked_steps(ntk.collect()), step)
    frame = ntk.filter(pl.col("trial_id").is_in(list(trained))).collect()
    out = []
    for trial, last in trained.items():
        cfg = _trial_config(run, trial)
        y = _targets(cfg)
        for stage, at in zip(STAGES, (0, last), strict=True):
            rows = frame.filter((pl.col("trial_id") == trial) & (pl.col("step") == at))
            kernels = _kernels(run / "trials" / trial, at)
            extra = {"trial_id": trial, "step": at, "stage": stage}
            out += [row | extra for row in stage_rows(cfg, rows, kernels, y)]
    return out


__all__ = ["STAGES", "rows_from_run", "stage_rows", "stage_steps", "tracked_steps"]

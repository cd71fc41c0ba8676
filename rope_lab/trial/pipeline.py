"""A trial's stages and the files they write: the one pipeline behind `rope-lab train` and sweeps.

A trial is its stages (`rope_lab.trial.stage_plan.trial_stages`): the train stage, then the stages
that read the trained model (as trained; one per scaling of `scaling_plan.scalings_for`, none
after a divergence), then its trials row. The trial id names the trained model only, so stages
added by a later spec run alone. Everything lands in `trial_dir(run_dir, trial_id)`:

    config.yaml                      the trial config (of the latest spec that finished it)
    checkpoints/<step>/              train stage checkpoints (every `train.checkpoint_every`)
    train/train_<step>.parquet       train rows, one segment per checkpoint
    ntk/ntk_<step>.parquet           NTK rows per tracked step (kernels in ntk/kernels_<step>.npz)
    model.eqx                        the trained model (not written for a diverged run)
    eval/<stage>.parquet             eval rows of one stage (eval-<hash>: as trained;
                                     <method>_x<f>-<hash>: zero-shot, then fine-tuned)
    ntk/<stage>.parquet              a RoPE scaling stage's K_cross metrics under its scaling
    superseded/<table>/<stage>.parquet  rows of finished stages the latest spec does not ask
                                     for (kept, not loaded; moved back if a spec asks again)
    stages/<stage>/done.json         a finished stage's result, with the size and CRC-32 of
                                     each file it wrote (`files`); stages/<stage>/.lock its lease
    trials/trial.parquet             the trials row (status, error, time, size, flat config)
    error.txt                        a failed trial's tracebacks (the trials row's `error`)
    _SUCCESS                         the trial is finished (done or diverged) for the stages
                                     it lists, with the proofs of their files and trials row

A sweep with `pack_seeds: true` runs the train stages of trials equal but for their seeds as
one task (`run_pack_train`, `rope_lab.trial.packing`): one vmapped program trains them, and
each member writes its own files above, as it would alone.

Stages take plain data (a config dict, the run directory, a stage name) so a Ray worker can run
them, import JAX only when they run (the sweep driver stays JAX-free), hold a per-stage lease so
two drivers never run one twice, and return small dicts (never arrays). A finished stage
returns its `done.json` result without work, unless a file it wrote is missing or changed since
(then it runs again); an interrupted train stage resumes from its latest checkpoint. A Python
error in a stage becomes a `failed` result carrying the traceback.

This module is the stages' bookkeeping and imports no JAX: stage folders, `done.json`, leases,
results and failures, the stage rows a trial loads, its trials row. What a stage computes is
`rope_lab.trial.stage_work` (JAX), imported when a stage runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rope_lab.config import TrialConfig, from_dict, to_dict
from rope_lab.results import TrialLease, mark_success, trial_dir, write_trial_row
from rope_lab.results.columns import (
    VARIANT_SCHEMA,
    config_schema,
    flatten_config,
    variant_columns,
)
from rope_lab.results.schema import SUCCESS_MARKER, TRIAL_SEGMENT
from rope_lab.runtime.atomic import atomic_write_text
from rope_lab.runtime.checked_files import CorruptFile, read_json
from rope_lab.runtime.memory_maps import free_programs_if_crowded
from rope_lab.tracking.runs import from_plain
from rope_lab.trial.stage_files import (
    FILES_KEY,
    MODEL_FILE,
    STAGE_TABLES,
    SUPERSEDED_DIR,
    StageRecomputed,
    file_proofs,
    rewind_checkpoints,
    stage_files,
    unproven_files,
    warn_recomputed,
)
from rope_lab.trial.stage_plan import DECODE, TRAIN, Stage, eval_stages, find_stage

STAGES_DIR = "stages"
TRAIN_STAGE = TRAIN
CONFIG_FILE = "config.yaml"
ERROR_FILE = "error.txt"  # the failed stages' tracebacks, as in the trials row's `error`
FINISHED = ("done", "diverged")
# the trials-row columns a `train.match` train stage's result carries (`rope_lab.trial.match`)
MATCH_COLUMNS = (
    "match_target",
    "match_loss",
    "match_lr",
    "match_steps",
    "match_reached",
)  # stage statuses that are results (a done.json is written)


def stage_dir(run_dir: str | Path, trial_id: str, stage: str) -> Path:
    """Folder holding one stage's lease and `done.json`."""
    return trial_dir(run_dir, trial_id) / STAGES_DIR / stage


def read_done(path: Path) -> dict | None:
    """A finished stage's result, or None: also when a file the stage wrote is missing or has
    changed since (`stage_files.unproven_files`; a StageRecomputed warning names it) or
    `done.json` is unreadable."""
    marker = path / "done.json"
    if not marker.exists():
        return None
    try:
        done = read_json(marker, hint=None)
    except CorruptFile as err:
        warn_recomputed(f"{err}; stage {path.name}")
        return None
    broken = unproven_files(path.parent.parent, path.name, done)
    if broken:
        warn_recomputed(f"{broken[0]}: stage {path.name}")
        return None
    return dict(done)


def compile_cache_dir() -> Path | None:
    """The persistent XLA compilation cache shared by every run: `$ROPE_LAB_COMPILE_CACHE` (a
    folder, or 0 for none), else `$XDG_CACHE_HOME/rope_lab/jax` (default `~/.cache/...`).

    One folder for all runs, so a rerun into a new folder, a later sweep with the same shapes,
    and workers on other nodes that share the home directory reuse compiled programs (JAX keys
    entries on the program, compile options, device and versions; it reads its cache folder
    once per process, so a per-run folder would hold only a worker's first run's programs).
    """
    setting = os.environ.get("ROPE_LAB_COMPILE_CACHE", "")
    if setting == "0":
        return None
    if setting and setting != "1":
        return Path(setting).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rope_lab" / "jax"


def setup_jax() -> None:
    """Point JAX at the persistent compilation cache (`compile_cache_dir`), if any."""
    import jax  # here, when a stage runs: importing this module must not import JAX

    cache = compile_cache_dir()
    if cache is None:
        return
    cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def _claim(folder: Path, stage: str, trial_id: str) -> tuple[dict | None, TrialLease | None]:
    """(the stage's earlier result, None) when it finished before or another process holds it
    (status "busy"); else (None, its acquired lease)."""
    done = read_done(folder)
    if done is not None:
        return {**done, "cached": True}, None
    lease = TrialLease(folder)
    if not lease.acquire():
        return {"status": "busy", "stage": stage, "trial_id": trial_id}, None
    done = read_done(folder)  # finished by another driver between the check and the lease
    if done is not None:
        lease.release()
        return {**done, "cached": True}, None
    if stage == TRAIN_STAGE and (folder / "done.json").exists():
        with contextlib.suppress(CorruptFile):
            rewind_checkpoints(folder.parent.parent, read_json(folder / "done.json"))
    return None, lease


def _record(folder: Path, result: dict, start: float) -> dict:
    """`result` with its times; a finished one (FINISHED) is written to `done.json` with the
    size and CRC-32 of each file the stage wrote (`stage_files`, under `files`)."""
    result["wall_time_s"] = time.time() - start
    result["finished_at"] = time.time()
    if result["status"] in FINISHED:
        trial = folder.parent.parent
        result[FILES_KEY] = file_proofs(trial, stage_files(trial, folder.name))
        atomic_write_text(folder / "done.json", json.dumps(result))
    return result


def _failure(stage: str, trial_id: str, start: float) -> dict:
    """The failed result of a stage whose work raised (call inside the `except`)."""
    return {
        "status": "failed",
        "stage": stage,
        "trial_id": trial_id,
        "error": traceback.format_exc(),
        "started_at": start,
        "wall_time_s": time.time() - start,
        "finished_at": time.time(),
    }


def _guarded(run_dir: str | Path, trial_id: str, stage: str, work: Callable[[], dict]) -> dict:
    """Run `work()` under the stage lease; catch Python errors into a failed result."""
    folder = stage_dir(run_dir, trial_id, stage)
    earlier, lease = _claim(folder, stage, trial_id)
    if lease is None:
        assert earlier is not None
        return earlier
    start = time.time()
    try:
        setup_jax()
        result = {"stage": stage, "trial_id": trial_id, "started_at": start, **work()}
        return _record(folder, result, start)
    except Exception:
        return _failure(stage, trial_id, start)
    finally:
        lease.release()
        free_programs_if_crowded()


def _work(cfg: TrialConfig, run_dir: Path, stage: Stage, tracking: dict | None) -> dict:
    """The stage's work (`rope_lab.trial.stage_work`): train (logging to the trackers of
    `tracking`, `rope_lab.tracking.config.for_workers`), decode or evaluate."""
    # Imported here, when a stage runs: stage_work imports JAX, which importing this module
    # (the sweep driver does) must not.
    from rope_lab.trial import stage_work

    if stage.is_train and cfg.train.processes > 1:
        from rope_lab.trial.processes import launcher_here

        return launcher_here().run(cfg, run_dir, tracking)
    if stage.is_train:
        if tracking is None:  # the call an untracked trial has always made
            return stage_work.train_stage(cfg, run_dir)
        return stage_work.train_stage(cfg, run_dir, from_plain(tracking))
    if stage.kind == DECODE:
        return stage_work.decode_stage(cfg, run_dir, stage)
    return stage_work.evaluate_stage(cfg, run_dir, stage)


def run_stage(
    config: dict[str, Any], run_dir: str | Path, name: str, tracking: dict | None = None
) -> dict:
    """Run the stage `name` of `stage_plan.trial_stages` of the trial `config` (a dict).

    The train stage trains (resuming from the latest checkpoint), tracks the NTK and saves the
    model; its result: status ("done", "diverged", "failed" or "busy"), n_params,
    n_params_non_embedding, tokens_seen, resumed_from, final_loss, ntk_time_s, train_time_s,
    phases (seconds per phase), and `tracking_warnings` when a tracker of `tracking` failed (the
    trackers it logs to live, `rope_lab.tracking`). Every other stage reads the saved model and
    writes its rows (`stage_work.evaluate_stage`, `stage_work.decode_stage`); its result: status
    and phases."""
    cfg = from_dict(TrialConfig, config)
    stage = find_stage(cfg, name)
    return _guarded(run_dir, cfg.trial_id, name, lambda: _work(cfg, Path(run_dir), stage, tracking))


def run_train_stage(config: dict[str, Any], run_dir: str | Path) -> dict:
    """`run_stage` of the train stage."""
    return run_stage(config, run_dir, TRAIN_STAGE)


def run_pack_train(
    configs: Sequence[dict[str, Any]], run_dir: str | Path, tracking: dict | None = None
) -> dict:
    """The train stages of trials equal but for their seeds (`rope_lab.trial.packing`; plain
    config dicts) in one task: `{"members": {trial_id: result}}`, each result that of the
    member's own train stage (`run_stage`), its `done.json` written as there, plus `pack` (the
    trial ids trained together, in order) and, when a member trained alone in this task,
    `pack_reason`.

    Each member's stage is claimed under its own lease: one finished before returns its earlier
    result, one another process holds is "busy"; the others train (`stage_work.train_pack`).
    An error fails every member trained here (each resumes from its own checkpoints when
    rerun)."""
    cfgs = [from_dict(TrialConfig, c) for c in configs]
    members: dict[str, dict] = {}
    leases: list[TrialLease] = []
    todo: list[TrialConfig] = []
    start = time.time()
    try:
        for cfg in cfgs:
            earlier, lease = _claim(stage_dir(run_dir, cfg.trial_id, TRAIN), TRAIN, cfg.trial_id)
            if lease is None:
                assert earlier is not None
                members[cfg.trial_id] = earlier
            else:
                leases.append(lease)
                todo.append(cfg)
        if todo:
            try:
                setup_jax()
                # Imported here, when the pack trains: stage_work imports JAX, which importing
                # this module (the sweep driver does) must not.
                from rope_lab.trial import stage_work

                outs = stage_work.train_pack(todo, Path(run_dir), from_plain(tracking))
                for cfg in todo:
                    result = {"stage": TRAIN, "trial_id": cfg.trial_id, "started_at": start}
                    folder = stage_dir(run_dir, cfg.trial_id, TRAIN)
                    members[cfg.trial_id] = _record(folder, result | outs[cfg.trial_id], start)
            except Exception:
                for cfg in todo:
                    members[cfg.trial_id] = _failure(TRAIN, cfg.trial_id, start)
    finally:
        for lease in leases:
            lease.release()
        free_programs_if_crowded()
    return {"members": {cfg.trial_id: members[cfg.trial_id] for cfg in cfgs}}


def select_stage_rows(folder: Path, stages: Sequence[str]) -> None:
    """Make the trial's loaded stage rows those of `stages`: segments of other finished stages
    move to `superseded/<table>/`, and those of `stages` found there move back (os.replace:
    never lost, never half-moved). Train and NTK-step segments are not stage segments."""
    finished = {p.name for p in (folder / STAGES_DIR).glob("*") if p.name != TRAIN_STAGE}
    wanted = set(stages)
    for table in STAGE_TABLES:
        live, kept = folder / table, folder / SUPERSEDED_DIR / table
        for path in sorted(live.glob("*.parquet")):
            if path.stem in finished and path.stem not in wanted:
                kept.mkdir(parents=True, exist_ok=True)
                os.replace(path, kept / path.name)
        for path in sorted(kept.glob("*.parquet")):
            if path.stem in wanted:
                live.mkdir(parents=True, exist_ok=True)
                os.replace(path, live / path.name)


def finish_trial(
    run_dir: str | Path, cfg: TrialConfig, results: Sequence[dict], *, sweep: str
) -> str:
    """Write the trials row and config.yaml from the stage results (each with its `stage`) and,
    unless a stage failed, `_SUCCESS` listing the trial's stages and proving their files and the
    trials row (`file_proofs`; a failed trial's earlier `_SUCCESS` is removed); select those
    stages' rows (`select_stage_rows`); the failed stages' tracebacks (the row's `error`) also go to
    `error.txt` (removed when a rerun has none). Returns the trial status: failed, else the
    train stage's status."""
    failed = [r for r in results if r.get("status") not in FINISHED]
    train = next((r for r in results if r.get("stage") == TRAIN_STAGE), {})
    status = "failed" if failed else train.get("status", "failed")
    error = "\n\n".join(str(r.get("error", r.get("status"))) for r in failed) or None

    def stamp(key: str, pick: Callable) -> dt.datetime:
        return dt.datetime.fromtimestamp(pick(r.get(key, time.time()) for r in results), dt.UTC)

    row = {
        "trial_id": cfg.trial_id,
        "sweep": sweep,
        "status": status,
        "error": error,
        "wall_time_s": sum(r.get("wall_time_s", 0.0) for r in results),
        "n_params": train.get("n_params"),
        "n_params_non_embedding": train.get("n_params_non_embedding"),
        "tokens_seen": train.get("tokens_seen"),
        **{name: train.get(name) for name in MATCH_COLUMNS},
        "started_at": stamp("started_at", min),
        "finished_at": stamp("finished_at", max),
    }
    folder = trial_dir(run_dir, cfg.trial_id)
    if error is not None:
        atomic_write_text(folder / ERROR_FILE, error if error.endswith("\n") else error + "\n")
    else:
        (folder / ERROR_FILE).unlink(missing_ok=True)  # a rerun that succeeded
    stages = [TRAIN_STAGE, *(s.name for s in eval_stages(cfg))]
    select_stage_rows(folder, stages)
    atomic_write_text(folder / CONFIG_FILE, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    write_trial_row(
        folder,
        row,
        {**flatten_config(cfg), **variant_columns(cfg)},
        config_schema={**config_schema(TrialConfig), **VARIANT_SCHEMA},
    )
    if status != "failed":
        written = [p for stage in stages for p in stage_files(folder, stage)]
        written.append(folder / "trials" / f"{TRIAL_SEGMENT}.parquet")
        mark_success(folder, stages, files=file_proofs(folder, written))
    else:  # an earlier spec's marker: this trial is not finished now
        (folder / SUCCESS_MARKER).unlink(missing_ok=True)
    return status


def run_trial_stages(
    cfg: TrialConfig, run_dir: str | Path, *, sweep: str | None = None
) -> tuple[str, list[dict]]:
    """Every stage of one trial in this process, in order, then its trials row (sweep name
    default: `cfg.name`). Returns the trial status (done, diverged, failed, or busy when another
    process holds a stage: no trials row then) and the stage results."""
    from rope_lab.trial.processes import check_launch

    check_launch(cfg)
    config = to_dict(cfg)
    results = [run_stage(config, run_dir, TRAIN_STAGE)]
    if results[0]["status"] == "done":
        for stage in eval_stages(cfg):
            results.append(run_stage(config, run_dir, stage.name))
    if any(r["status"] == "busy" for r in results):
        return "busy", results
    return finish_trial(run_dir, cfg, results, sweep=cfg.name if sweep is None else sweep), results


__all__ = [
    "CONFIG_FILE",
    "ERROR_FILE",
    "FILES_KEY",
    "MODEL_FILE",
    "STAGES_DIR",
    "TRAIN_STAGE",
    "StageRecomputed",
    "compile_cache_dir",
    "finish_trial",
    "read_done",
    "run_pack_train",
    "run_stage",
    "run_train_stage",
    "run_trial_stages",
    "select_stage_rows",
    "setup_jax",
    "stage_dir",
]

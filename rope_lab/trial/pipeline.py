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
    stages/<stage>/done.json         a finished stage's result; stages/<stage>/.lock its lease
    trials/trial.parquet             the trials row (status, error, time, size, flat config)
    error.txt                        a failed trial's tracebacks (the trials row's `error`)
    _SUCCESS                         the trial is finished (done or diverged) for the stages
                                     it lists

A sweep with `pack_seeds: true` runs the train stages of trials equal but for their seeds as
one task (`run_pack_train`, `rope_lab.trial.packing`): one vmapped program trains them, and
each member writes its own files above, as it would alone.

Stages take plain data (a config dict, the run directory, a stage name) so a Ray worker can run
them, import JAX only when they run (the sweep driver stays JAX-free), hold a per-stage lease so
two drivers never run one twice, and return small dicts (never arrays). A finished stage
returns its `done.json` result without work; an interrupted train stage resumes from its latest
checkpoint. A Python error in a stage becomes a `failed` result carrying the traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from rope_lab.results import TrialLease, append_rows, mark_success, trial_dir, write_trial_row
from rope_lab.results.columns import (
    VARIANT_SCHEMA,
    config_schema,
    flatten_config,
    variant_columns,
)
from rope_lab.runtime.atomic import atomic_write_text
from rope_lab.runtime.timing import Phases
from rope_lab.trial.stage_plan import DECODE, TRAIN, Stage, eval_stages, find_stage

STAGES_DIR = "stages"
TRAIN_STAGE = TRAIN
MODEL_FILE = "model.eqx"
CONFIG_FILE = "config.yaml"
ERROR_FILE = "error.txt"  # the failed stages' tracebacks, as in the trials row's `error`
SUPERSEDED_DIR = "superseded"  # rows of finished stages the latest spec does not ask for
STAGE_TABLES = ("eval", "ntk")  # tables with one segment per evaluation stage
FINISHED = ("done", "diverged")  # stage statuses that are results (a done.json is written)


def stage_dir(run_dir: str | Path, trial_id: str, stage: str) -> Path:
    """Folder holding one stage's lease and `done.json`."""
    return trial_dir(run_dir, trial_id) / STAGES_DIR / stage


def read_done(path: Path) -> dict | None:
    """A finished stage's result, or None."""
    marker = path / "done.json"
    return json.loads(marker.read_text()) if marker.exists() else None


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


def _setup_jax() -> None:
    """Point JAX at the persistent compilation cache (`compile_cache_dir`), if any."""
    import jax

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
    return None, lease


def _record(folder: Path, result: dict, start: float) -> dict:
    """`result` with its times; a finished one (FINISHED) is written to `done.json`."""
    result["wall_time_s"] = time.time() - start
    result["finished_at"] = time.time()
    if result["status"] in FINISHED:
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
        _setup_jax()
        result = {"stage": stage, "trial_id": trial_id, "started_at": start, **work()}
        return _record(folder, result, start)
    except Exception:
        return _failure(stage, trial_id, start)
    finally:
        lease.release()


def run_stage(config: dict[str, Any], run_dir: str | Path, name: str) -> dict:
    """Run the stage `name` of `stage_plan.trial_stages` of the trial `config` (a dict).

    The train stage trains (resuming from the latest checkpoint), tracks the NTK and saves the
    model; its result: status ("done", "diverged", "failed" or "busy"), n_params,
    n_params_non_embedding, tokens_seen, resumed_from, final_loss, ntk_time_s, train_time_s,
    phases (seconds per phase). Every other stage reads the saved model and writes its rows
    (`_evaluate`); its result: status and phases."""
    cfg = from_dict(TrialConfig, config)
    stage = find_stage(cfg, name)
    if stage.is_train:
        return _guarded(run_dir, cfg.trial_id, name, lambda: _train(cfg, Path(run_dir)))
    if stage.kind == DECODE:
        return _guarded(run_dir, cfg.trial_id, name, lambda: _decode(cfg, Path(run_dir), stage))
    return _guarded(run_dir, cfg.trial_id, name, lambda: _evaluate(cfg, Path(run_dir), stage))


def run_train_stage(config: dict[str, Any], run_dir: str | Path) -> dict:
    """`run_stage` of the train stage."""
    return run_stage(config, run_dir, TRAIN_STAGE)


def run_pack_train(configs: Sequence[dict[str, Any]], run_dir: str | Path) -> dict:
    """The train stages of trials equal but for their seeds (`rope_lab.trial.packing`; plain
    config dicts) in one task: `{"members": {trial_id: result}}`, each result that of the
    member's own train stage (`run_stage`), its `done.json` written as there, plus `pack` (the
    trial ids trained together, in order) and, when a member trained alone in this task,
    `pack_reason`.

    Each member's stage is claimed under its own lease: one finished before returns its earlier
    result, one another process holds is "busy"; the others train (`_train_pack`). An error
    fails every member trained here (each resumes from its own checkpoints when rerun)."""
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
                _setup_jax()
                outs = _train_pack(todo, Path(run_dir))
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
    return {"members": {cfg.trial_id: members[cfg.trial_id] for cfg in cfgs}}


class _TrainJob:
    """One trial's train stage around a training loop: its folder and `config.yaml`, its
    checkpointer and the state restored from it (`model`, `opt_state`, `start`), its hooks
    (track the NTK; every `train.checkpoint_every` steps write the train rows, then a
    checkpoint) and its stage result from the loop's `TrainResult` (`finish`). The same for a
    trial trained alone (`_train`) and for each member of a pack (`_train_pack`)."""

    def __init__(self, cfg: TrialConfig, run_dir: Path, phases: Phases):
        self.cfg, self.run_dir, self.phases = cfg, run_dir, phases
        self.folder = trial_dir(run_dir, cfg.trial_id)
        self.written = 0  # train rows on disk up to this step
        self.tracker: Any = None

    def __enter__(self) -> _TrainJob:
        cfg, phases = self.cfg, self.phases
        with phases.phase("setup"):
            from rope_lab.tasks import task_from_config
            from rope_lab.trial.checkpoint import TrialCheckpointer
            from rope_lab.trial.hooks import Hook
            from rope_lab.trial.train import init_state

            self.folder.mkdir(parents=True, exist_ok=True)
            config_text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
            atomic_write_text(self.folder / CONFIG_FILE, config_text)
            every = cfg.train.checkpoint_every or max(cfg.train.steps, 1)
            self.model, self.opt_state = init_state(cfg)
            task = task_from_config(cfg.task)
        self.ckpt = TrialCheckpointer(self.folder / "checkpoints", every=every)
        try:
            with phases.phase("io"):
                self.start = self.ckpt.latest_step() or 0
                if self.start:
                    self.model, self.opt_state, self.start, _ = self.ckpt.restore(
                        self.model, self.opt_state
                    )
            self.written = self.start
            self.hooks = [Hook(every=every, fn=self._checkpoint)]
            if cfg.ntk.enabled:
                from rope_lab.ntk.tracking import tracking_hook

                def sink(step: int, rows: list[dict]) -> None:
                    append_rows(self.folder, "ntk", rows, segment=f"ntk_{step:08d}")

                with phases.phase("ntk"):
                    hook, self.tracker = tracking_hook(
                        cfg, task, sink, folder=self.folder, done_steps=self.start
                    )
                self.hooks.insert(0, dataclasses.replace(hook, fn=_timed(phases, "ntk", hook.fn)))
        except BaseException:
            self.ckpt.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.ckpt.close()

    def _flush(self, history: list[dict], upto: int) -> None:
        rows = [r for r in history if self.written < r["step"] <= upto]
        if rows:
            append_rows(self.folder, "train", rows, segment=f"train_{upto:08d}")
        self.written = upto

    def _checkpoint(self, state: Any) -> None:
        # Rows first: a kill between the two recomputes them (same segment name), whereas a
        # checkpoint saved before its rows would lose them on resume.
        with self.phases.phase("io"):
            self._flush(state.history, state.step)
            self.ckpt.save(
                state.step, state.model, state.opt_state, {"data_step": state.step}, force=True
            )

    def finish(self, result: Any) -> dict:
        """The remaining train rows and the model written; the stage's result (no phases)."""
        from rope_lab.model.transformer import count_non_embedding_params, count_params
        from rope_lab.trial.checkpoint import save_model

        with self.phases.phase("io"):
            self._flush(result.history, result.steps_done)
        out = {
            "status": "diverged" if result.diverged else "done",
            "n_params": count_params(result.model),
            "n_params_non_embedding": count_non_embedding_params(result.model),
            "tokens_seen": result.tokens_seen,
            "resumed_from": self.start,
            "final_loss": result.history[-1]["loss"] if result.history else None,
            "ntk_time_s": 0.0 if self.tracker is None else self.tracker.seconds,
            "train_time_s": result.wall_time_s,
        }
        if not result.diverged:
            with self.phases.phase("io"):
                save_model(self.folder / MODEL_FILE, result.model)
        return out


def _train_alone(job: _TrainJob) -> dict:
    from rope_lab.trial.train import train

    with job.phases.phase("train"):
        result = train(
            job.cfg,
            model=job.model,
            opt_state=job.opt_state,
            start_step=job.start,
            hooks=job.hooks,
        )
    return job.finish(result)


def _train(cfg: TrialConfig, run_dir: Path) -> dict:
    phases = Phases()
    with _TrainJob(cfg, run_dir, phases) as job:
        out = _train_alone(job)
    return out | {"phases": phases.as_dict()}


def _train_pack(cfgs: Sequence[TrialConfig], run_dir: Path) -> dict[str, dict]:
    """Train stage results of `cfgs` by trial id (`run_pack_train`): the members that resume
    from the same step (all, unless a kill fell between two members' checkpoints) train as one
    program (`ensemble.train_packed`), each with its own `_TrainJob`; a member left alone, and
    every member when the trials would train over several devices of this worker, trains
    alone. The phases are the whole task's, in every member's result; so is `train_time_s` of
    the members trained as one program."""
    from rope_lab.trial.ensemble import train_packed
    from rope_lab.trial.packing import mismatch
    from rope_lab.trial.parallel import resolve_devices

    reason = mismatch(cfgs)
    if reason is not None:
        raise ValueError(f"cannot train as one pack: {reason}")
    tr = cfgs[0].train
    devices = resolve_devices(tr.devices, tr.batch_size)
    ids = [c.trial_id for c in cfgs]
    phases = Phases()
    outs: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        jobs = [stack.enter_context(_TrainJob(c, run_dir, phases)) for c in cfgs]
        groups: dict[int, list[_TrainJob]] = {}
        for job in jobs:
            groups.setdefault(job.start, []).append(job)
        for start, group in groups.items():
            if devices > 1 or len(group) == 1:
                why = (
                    f"this worker trains each on {devices} devices; a pack trains on one"
                    if devices > 1
                    else f"resumed alone from step {start} (the others from other steps)"
                )
                for job in group:
                    outs[job.cfg.trial_id] = _train_alone(job) | {"pack_reason": why}
                continue
            with phases.phase("train"):
                results = train_packed(
                    [job.cfg for job in group],
                    models=[job.model for job in group],
                    opt_states=[job.opt_state for job in group],
                    start_step=start,
                    hooks=[job.hooks for job in group],
                )
            for job, result in zip(group, results, strict=True):
                outs[job.cfg.trial_id] = job.finish(result)
    return {tid: outs[tid] | {"pack": ids, "phases": phases.as_dict()} for tid in ids}


def _timed(phases: Phases, name: str, fn: Callable) -> Callable:
    def run(state):
        with phases.phase(name):
            fn(state)

    return run


def _evaluate(cfg: TrialConfig, run_dir: Path, stage: Stage) -> dict:
    """Rows of one stage reading the saved model into `eval/<stage>.parquet`: the model as
    trained, or under the stage's scaling zero-shot (none when it leaves the trained frequencies
    as they are), then fine-tuned when `scaling_plan.fine_tuned`; and the NTK under a RoPE
    scaling into `ntk/<stage>.parquet` when `ntk_plan.measures_under`."""
    from rope_lab.model.factory import make_model
    from rope_lab.ntk.plan import measures_under
    from rope_lab.tasks import task_from_config
    from rope_lab.trial.checkpoint import load_model
    from rope_lab.trial.evaluate import evaluate_model, finetune_and_evaluate
    from rope_lab.trial.scaling_plan import same_frequencies, scalings_for

    assert stage.scaling is not None
    phases = Phases()
    folder = trial_dir(run_dir, cfg.trial_id)
    with phases.phase("io"):
        model = load_model(folder / MODEL_FILE, make_model(cfg))
    task = task_from_config(cfg.task)
    step = cfg.train.steps
    trained = scalings_for(cfg)[0]
    rows: list[dict] = []
    if stage.scaling == trained or not same_frequencies(trained, stage.scaling):
        with phases.phase("eval"):
            rows += evaluate_model(model, task, cfg, step=step, scalings=[stage.scaling])
    if stage.scaling != trained:
        with phases.phase("finetune"):
            rows += finetune_and_evaluate(model, task, cfg, step=step, scalings=[stage.scaling])
    with phases.phase("io"):
        append_rows(folder, "eval", rows, segment=stage.name)
    if stage.scaling != trained and measures_under(cfg, stage.scaling):
        from rope_lab.ntk.tracking import NTKTracker

        with phases.phase("ntk"):
            ntk_rows = NTKTracker(cfg, task).under_scalings(model, step, [stage.scaling])
        with phases.phase("io"):
            append_rows(folder, "ntk", ntk_rows, segment=stage.name)
    return {"status": "done", "phases": phases.as_dict()}


def _decode(cfg: TrialConfig, run_dir: Path, stage: Stage) -> dict:
    """Eval rows (`mode` "decode") of answers generated under every zero-shot scaling and each
    of `eval.decode.protocols` into `eval/<stage>.parquet`."""
    from rope_lab.model.factory import make_model
    from rope_lab.tasks import task_from_config
    from rope_lab.trial.checkpoint import load_model
    from rope_lab.trial.decode_eval import decode_rows
    from rope_lab.trial.stage_plan import decoded_scalings

    phases = Phases()
    folder = trial_dir(run_dir, cfg.trial_id)
    with phases.phase("io"):
        model = load_model(folder / MODEL_FILE, make_model(cfg))
    task = task_from_config(cfg.task)
    rows: list[dict] = []
    with phases.phase("decode"):
        for scaling in decoded_scalings(cfg):
            rows += decode_rows(
                model,
                task,
                cfg,
                step=cfg.train.steps,
                scaling=scaling,
                protocols=cfg.eval.decode.protocols,
            )
    with phases.phase("io"):
        append_rows(folder, "eval", rows, segment=stage.name)
    return {"status": "done", "phases": phases.as_dict()}


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
    unless a stage failed, `_SUCCESS` listing the trial's stages; select those stages' rows
    (`select_stage_rows`); the failed stages' tracebacks (the row's `error`) also go to
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
        mark_success(folder, stages)
    return status


def run_trial_stages(
    cfg: TrialConfig, run_dir: str | Path, *, sweep: str | None = None
) -> tuple[str, list[dict]]:
    """Every stage of one trial in this process, in order, then its trials row (sweep name
    default: `cfg.name`). Returns the trial status (done, diverged, failed, or busy when another
    process holds a stage: no trials row then) and the stage results."""
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
    "MODEL_FILE",
    "STAGES_DIR",
    "TRAIN_STAGE",
    "compile_cache_dir",
    "finish_trial",
    "read_done",
    "run_pack_train",
    "run_stage",
    "run_train_stage",
    "run_trial_stages",
    "select_stage_rows",
    "stage_dir",
]

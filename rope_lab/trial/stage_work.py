"""What a trial's stages compute (JAX): train, a pack's train, evaluate, decode.

`rope_lab.trial.pipeline` (JAX-free) runs each stage under its lease and records its result;
it imports this module only when a stage runs, so the sweep driver never imports JAX. Each
function here takes the trial config and the run directory (and the stage), writes the stage's
files (those listed in `rope_lab.trial.pipeline`) and returns the stage's result without its
times: a status, the train stage's counts, and `phases` (seconds per phase).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rope_lab.config import TrialConfig, to_dict
from rope_lab.hooks import Hook
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import count_non_embedding_params, count_params
from rope_lab.ntk.plan import measures_under
from rope_lab.ntk.tracking import NTKTracker, tracking_hook
from rope_lab.results import append_rows, trial_dir
from rope_lab.runtime.atomic import atomic_write_text
from rope_lab.runtime.timing import Phases
from rope_lab.tasks import task_from_config
from rope_lab.tracking.config import TrackingConfig
from rope_lab.tracking.runs import TrialTracker
from rope_lab.tracking.trial_logs import ntk_sink, train_hook
from rope_lab.trial import match
from rope_lab.trial.checkpoint import TrialCheckpointer, load_model, save_model
from rope_lab.trial.decode_eval import decode_rows
from rope_lab.trial.ensemble import train_packed
from rope_lab.trial.evaluate import evaluate_model
from rope_lab.trial.finetune import finetune_and_evaluate
from rope_lab.trial.packing import mismatch
from rope_lab.trial.parallel import resolve_devices, to_default_device
from rope_lab.trial.pipeline import CONFIG_FILE, MODEL_FILE
from rope_lab.trial.processes import is_writer
from rope_lab.trial.scaling_plan import same_frequencies, scalings_for
from rope_lab.trial.stage_plan import Stage, decoded_scalings
from rope_lab.trial.train import init_state, train


def _measured_once(measure: Callable[[Any], None]) -> Callable[[Any], None]:
    """The NTK hook of a trial of several processes: every process gathers the model whole onto
    its first device (a collective), process 0 alone measures and writes the rows."""

    def once(state: Any) -> None:
        model = to_default_device(state.model)
        if is_writer():
            measure(dataclasses.replace(state, model=model))

    return once


class _TrainJob:
    """One trial's train stage around a training loop: its folder and `config.yaml`, its
    checkpointer and the state restored from it (`model`, `opt_state`, `start`), its hooks
    (track the NTK; every `train.checkpoint_every` steps write the train rows, then a
    checkpoint; log the train and NTK rows to the trackers `tracking` names) and its stage
    result from the loop's `TrainResult` (`finish`). The same for a trial trained alone
    (`train_stage`) and for each member of a pack (`train_pack`)."""

    def __init__(
        self, cfg: TrialConfig, run_dir: Path, phases: Phases, tracking: TrackingConfig | None
    ):
        self.cfg, self.run_dir, self.phases = cfg, run_dir, phases
        self.folder = trial_dir(run_dir, cfg.trial_id)
        self.written = 0  # train rows on disk up to this step
        self.tracker: Any = None
        self.tracking = tracking
        self.live: TrialTracker | None = None

    def __enter__(self) -> _TrainJob:
        cfg, phases = self.cfg, self.phases
        with phases.phase("setup"):
            self.folder.mkdir(parents=True, exist_ok=True)
            config_text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
            if is_writer():
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
            if self.tracking is not None:
                with phases.phase("tracking"):
                    self.live = TrialTracker(self.tracking, cfg, resume_step=self.start)
                logs = train_hook(self.live, cfg.train.log_every, self.start)
                timed = _timed(phases, "tracking", logs.fn)
                self.hooks.insert(0, dataclasses.replace(logs, fn=timed))
            if cfg.ntk.enabled:

                def sink(step: int, rows: list[dict]) -> None:
                    append_rows(self.folder, "ntk", rows, segment=f"ntk_{step:08d}")

                rows_to = sink if self.live is None else ntk_sink(self.live, sink)
                with phases.phase("ntk"):
                    hook, self.tracker = tracking_hook(
                        cfg, task, rows_to, folder=self.folder, done_steps=self.start
                    )
                measure = hook.fn if cfg.train.processes == 1 else _measured_once(hook.fn)
                self.hooks.insert(0, dataclasses.replace(hook, fn=_timed(phases, "ntk", measure)))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.ckpt.close()
        if self.live is not None:
            self.live.close()

    def _flush(self, history: list[dict], upto: int) -> None:
        rows = [r for r in history if self.written < r["step"] <= upto]
        if rows and is_writer():
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
        if self.live is not None:
            with self.phases.phase("tracking"):
                self.live.close()
            if self.live.warnings:
                out["tracking_warnings"] = self.live.warnings
        if not result.diverged and is_writer():
            with self.phases.phase("io"):
                save_model(self.folder / MODEL_FILE, result.model)
        return out


def _train_alone(job: _TrainJob) -> dict:
    with job.phases.phase("train"):
        result = train(
            job.cfg,
            model=job.model,
            opt_state=job.opt_state,
            start_step=job.start,
            hooks=job.hooks,
        )
    return job.finish(result)


def _train_matched(cfg: TrialConfig, run_dir: Path, phases: Phases) -> dict:
    """The train stage of a `train.match` trial: the search (`rope_lab.trial.match`), the
    kept run's train rows and model written, its `match_columns` in the result."""
    folder = trial_dir(run_dir, cfg.trial_id)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / CONFIG_FILE, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    with phases.phase("train"):
        model, outcome, target = match.search(cfg, task_from_config(cfg.task), run_dir)
    with phases.phase("io"):
        if outcome.history:
            append_rows(folder, "train", outcome.history, segment=f"train_{outcome.steps:08d}")
        save_model(folder / MODEL_FILE, model)
    return {
        "status": "done",
        "n_params": count_params(model),
        "n_params_non_embedding": count_non_embedding_params(model),
        "tokens_seen": outcome.steps * cfg.train.batch_size * cfg.train.length,
        "resumed_from": 0,
        "final_loss": outcome.history[-1]["loss"] if outcome.history else None,
        "ntk_time_s": 0.0,
        "train_time_s": phases.as_dict().get("train", 0.0),
        **match.match_columns(outcome, target),
    }


def train_stage(cfg: TrialConfig, run_dir: Path, tracking: TrackingConfig | None = None) -> dict:
    """The train stage of one trial (`pipeline.run_stage`), logging to `tracking`'s trackers;
    a `train.match` trial runs its search instead (`_train_matched`, no trackers)."""
    phases = Phases()
    if cfg.train.match.target is not None:
        return _train_matched(cfg, run_dir, phases) | {"phases": phases.as_dict()}
    with _TrainJob(cfg, run_dir, phases, tracking) as job:
        out = _train_alone(job)
    return out | {"phases": phases.as_dict()}


def train_pack(
    cfgs: Sequence[TrialConfig], run_dir: Path, tracking: TrackingConfig | None = None
) -> dict[str, dict]:
    """Train stage results of `cfgs` by trial id (`pipeline.run_pack_train`): the members that
    resume from the same step (all, unless a kill fell between two members' checkpoints) train
    as one program (`ensemble.train_packed`), each with its own `_TrainJob`; a member left
    alone, and every member when the trials would train over several devices of this worker,
    trains alone. The phases are the whole task's, in every member's result; so is
    `train_time_s` of the members trained as one program. Each member logs to its own runs."""
    reason = mismatch(cfgs)
    if reason is not None:
        raise ValueError(f"cannot train as one pack: {reason}")
    tr = cfgs[0].train
    devices = resolve_devices(tr.devices, tr.batch_size)
    ids = [c.trial_id for c in cfgs]
    phases = Phases()
    outs: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        jobs = [stack.enter_context(_TrainJob(c, run_dir, phases, tracking)) for c in cfgs]
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


def evaluate_stage(cfg: TrialConfig, run_dir: Path, stage: Stage) -> dict:
    """Rows of one stage reading the saved model into `eval/<stage>.parquet`: the model as
    trained, or under the stage's scaling zero-shot (none when it leaves the trained frequencies
    as they are), then fine-tuned when `scaling_plan.fine_tuned`; and the NTK under a RoPE
    scaling into `ntk/<stage>.parquet` when `ntk_plan.measures_under`."""
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
        with phases.phase("ntk"):
            ntk_rows = NTKTracker(cfg, task).under_scalings(model, step, [stage.scaling])
        with phases.phase("io"):
            append_rows(folder, "ntk", ntk_rows, segment=stage.name)
    return {"status": "done", "phases": phases.as_dict()}


def decode_stage(cfg: TrialConfig, run_dir: Path, stage: Stage) -> dict:
    """Eval rows (`mode` "decode") of answers generated under every zero-shot scaling and each
    of `eval.decode.protocols` into `eval/<stage>.parquet`."""
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


__all__ = ["decode_stage", "evaluate_stage", "train_pack", "train_stage"]

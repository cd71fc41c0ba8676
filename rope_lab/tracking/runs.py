"""One trial's runs in the trackers a sweep names: TensorBoard event files (the `tensorboard`
package's own `EventFileWriter`, read back by its `EventAccumulator`) and a W&B run.

`TrialTracker` opens one run per named tracker, logs scalars to each and closes them. Logging
hands the scalars to a thread of its own, so the training loop only pays for a queue put
(`benchmarks/tracking.py`); closing waits until that thread has logged everything. A tracker
that fails (not importable, cannot write, raises) is dropped for the rest of the trial with
one warning line in `warnings`; it never fails the trial, whose Parquet tables stay the
record. A train stage that resumes from a checkpoint at step s resumes its runs: TensorBoard
gets a `SessionLog.START` at step s + 1 (at 0 when a try killed before its first checkpoint
starts again), after which TensorBoard drops the earlier events from that step on (the ones
the interrupted try logged past its checkpoint), and W&B resumes the run
whose id is the trial id (`resume="allow"`), so a resumed trial continues its run, never
starts a second one.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rope_lab.config import TrialConfig, to_dict
from rope_lab.results.columns import flatten_config
from rope_lab.tracking.config import TrackingConfig
from rope_lab.tracking.scalars import hyperparameters

FLUSH_SECS = 5  # how stale TensorBoard's view of a running trial may get


class _Run(Protocol):
    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...
    def close(self) -> None: ...


class TensorBoardRun:
    """Event files of one trial under `<folder>/<sweep>/<trial_id>/` (several, one per stage
    task that logged; TensorBoard reads them as one run)."""

    def __init__(self, folder: str, cfg: TrialConfig, resume_step: int | None):
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._pb = event_pb2
        self.path = Path(folder) / cfg.name / cfg.trial_id
        self._writer = EventFileWriter(str(self.path), flush_secs=FLUSH_SECS)
        if resume_step is not None:  # a train stage: it logs again what an earlier try logged
            restart = self._pb.SessionLog(status=self._pb.SessionLog.START)
            first = resume_step + 1 if resume_step else 0  # from 0: the NTK's step 0 again
            self._writer.add_event(
                self._pb.Event(wall_time=time.time(), step=first, session_log=restart)
            )
        if resume_step == 0:
            from tensorboard.plugins.hparams import summary_v2

            flat = hyperparameters(flatten_config(cfg))
            self._add(0, summary_v2.hparams_pb(flat, trial_id=cfg.trial_id))

    def _add(self, step: int, summary: Any) -> None:
        self._writer.add_event(self._pb.Event(wall_time=time.time(), step=step, summary=summary))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """One scalar event per tag at `step`."""
        from tensorboard.compat.proto import summary_pb2

        values = [summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in scalars.items()]
        self._add(step, summary_pb2.Summary(value=values))

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


class WandbRun:
    """The W&B run of one trial: id and name the trial id, group the sweep, the trial config as
    its config; offline (a folder under `dir`, synced later with `wandb sync`) unless the mode
    says online."""

    def __init__(self, tracking: TrackingConfig, cfg: TrialConfig):
        import wandb

        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
        mode: Any = tracking.resolved_mode()  # checked against WANDB_MODES
        self._run = wandb.init(
            project=tracking.wandb,
            group=cfg.name,
            name=cfg.trial_id,
            id=cfg.trial_id,
            resume="allow",
            mode=mode,
            dir=tracking.wandb_dir,
            config={"trial_id": cfg.trial_id, **to_dict(cfg)},
            settings=settings,
        )

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """The scalars as one history row at `step`."""
        self._run.log(dict(scalars), step=step)

    def close(self) -> None:
        """Finish the run (its files written)."""
        self._run.finish()


def _open(key: str, tracking: TrackingConfig, cfg: TrialConfig, resume_step: int | None) -> _Run:
    if key == "tensorboard":
        assert tracking.tensorboard is not None
        return TensorBoardRun(tracking.tensorboard, cfg, resume_step)
    return WandbRun(tracking, cfg)


class TrialTracker:
    """The runs of one trial in every tracker `tracking` names (module docstring).

    `resume_step`: the step a train stage starts from (0: a fresh run, whose hyperparameters
    are written; s > 0: resumed from a checkpoint at s); None for a task that logs no training
    (the trial's evaluation)."""

    def __init__(self, tracking: TrackingConfig, cfg: TrialConfig, resume_step: int | None):
        self.trial_id = cfg.trial_id
        self.warnings: list[str] = []
        self._runs: dict[str, _Run] = {}
        for key in ("tensorboard", "wandb"):
            if getattr(tracking, key) is not None:
                try:
                    self._runs[key] = _open(key, tracking, cfg, resume_step)
                except Exception as err:
                    self._drop(key, "could not start", err)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="rope_lab-tracking", daemon=True)
        self._thread.start()

    def _drop(self, key: str, what: str, err: Exception) -> None:
        self._runs.pop(key, None)
        message = " ".join(f"{type(err).__name__}: {err}".split())
        self.warnings.append(
            f"tracking.{key}: trial {self.trial_id}: {what} ({message}); it logs nothing more "
            "for this trial, the Parquet tables stay the record"
        )

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """Log `scalars` (tag -> value) at `step` to every run still working (by the thread)."""
        if scalars and self._thread.is_alive():
            self._queue.put((step, dict(scalars)))

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            step, scalars = item
            for key, run in list(self._runs.items()):
                try:
                    run.log(step, scalars)
                except Exception as err:
                    self._drop(key, f"failed at step {step}", err)

    def close(self) -> None:
        """Log what is queued, then close every run (a run that fails to close is reported
        like a failed log). Closing twice does nothing more."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        for key, run in list(self._runs.items()):
            try:
                run.close()
            except Exception as err:
                self._drop(key, "failed to close", err)
        self._runs.clear()


def from_plain(tracking: Mapping[str, Any] | None) -> TrackingConfig | None:
    """The `TrackingConfig` a stage task received (`config.for_workers`), None when off."""
    return None if tracking is None else TrackingConfig(**tracking)

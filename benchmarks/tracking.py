"""Tracking's cost per logged step against a tiny trial's train step.

Trial: width 32, depth 1, head_dim 16, passkey (vocabulary 24, needle 2), L_train 16, batch 8,
float32 on the default device: the smallest trial of the tests, so the ratio is as large as it
gets. Its step time is the median interval between consecutive steps of `rope_lab.trial.train`
(a hook stamping every step, after `--warmup` steps), what a sweep's train loop pays per step.

Tracking: a `TrialTracker` with both trackers (TensorBoard event files and a W&B run, offline)
in a temporary folder, as a train stage opens it; one logged step is the train hook's call
with one new history row (four scalars to each tracker), timed alone, `--logs` times; the
median is reported. Opening and closing the runs (once per trial) are reported apart. The
loop logs every `train.log_every` steps (default 10), so the cost per train step is the ratio
over log_every. End to end, the same trial's step time is also measured with every step
logged (`train.log_every` 1) by the train stage's hook against none, `--repeats` runs of each,
interleaved (on a busy machine this difference is within the noise).

The work the logging thread does per logged step (each tracker's own `log`, timed
synchronously) is reported too: it does not block the loop, but it takes CPU time beside it.

Run: `python -m benchmarks.tracking [--steps 300] [--logs 300] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from rope_lab.config import TrialConfig, from_dict
from rope_lab.hooks import Hook, StepState
from rope_lab.tracking.config import TrackingConfig
from rope_lab.tracking.runs import TrialTracker
from rope_lab.tracking.trial_logs import train_hook

TINY = {
    "name": "bench",
    "model": {"depth": 1, "head_dim": 16, "width": 32},
    "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
    "train": {"length": 16, "batch_size": 8, "steps": 300, "warmup_steps": 2},
    "ntk": {"enabled": False},
}


def step_seconds(cfg: TrialConfig, warmup: int, tracked: str | None = None) -> float:
    """Median seconds between consecutive train steps after `warmup` steps; with `tracked` (a
    folder), every step's row is logged to both trackers there by the train stage's hook."""
    from rope_lab.trial.train import train

    stamps: list[float] = []
    hooks = [Hook(every=1, fn=lambda state: stamps.append(time.perf_counter()))]
    tracker = None
    if tracked is not None:
        tracking = TrackingConfig(tensorboard=f"{tracked}/tb", wandb="bench", wandb_dir=tracked)
        tracker = TrialTracker(tracking, cfg, resume_step=0)
        hooks.insert(0, train_hook(tracker, every=1, start=0))
    train(cfg, hooks=hooks)
    if tracker is not None:
        tracker.close()
        assert not tracker.warnings, tracker.warnings
    gaps = [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]
    return statistics.median(gaps)


def logged_step_seconds(cfg: TrialConfig, logs: int) -> tuple[float, float, float]:
    """(median seconds of one logged step, seconds to open the runs, to close them)."""
    os.environ.pop("WANDB_API_KEY", None)
    with tempfile.TemporaryDirectory(prefix="rope_lab_tracking_") as tmp:
        tracking = TrackingConfig(tensorboard=f"{tmp}/tb", wandb="bench", wandb_dir=tmp)
        start = time.perf_counter()
        tracker = TrialTracker(tracking, cfg, resume_step=0)
        opened = time.perf_counter() - start
        hook = train_hook(tracker, every=1, start=0)
        history: list[dict] = []
        times = []
        for step in range(1, logs + 1):
            history.append(
                {"step": step, "loss": 3.0 / step, "lr": 1e-3, "grad_norm": 0.5,
                 "tokens_per_s": 1e4}
            )  # fmt: skip
            state = StepState(step, None, None, history)  # type: ignore[arg-type]
            start = time.perf_counter()
            hook.fn(state)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        tracker.close()
        closed = time.perf_counter() - start
        assert not tracker.warnings, tracker.warnings
    return statistics.median(times), opened, closed


def off_thread_seconds(cfg: TrialConfig, logs: int) -> dict[str, float]:
    """Median seconds of one logged step's work on the logging thread, per tracker: what that
    thread (and, for W&B, its service process) spends of the machine's CPU."""
    os.environ.pop("WANDB_API_KEY", None)
    scalars = {"train/loss": 1.0, "train/lr": 1e-3, "train/grad_norm": 0.5,
               "train/tokens_per_s": 1e4}  # fmt: skip
    out = {}
    with tempfile.TemporaryDirectory(prefix="rope_lab_tracking_") as tmp:
        for key, tracking in (
            ("tensorboard", TrackingConfig(tensorboard=f"{tmp}/tb")),
            ("wandb", TrackingConfig(wandb="bench", wandb_dir=tmp)),
        ):
            tracker = TrialTracker(tracking, cfg, resume_step=0)
            (run,) = tracker._runs.values()
            times = []
            for step in range(1, logs + 1):
                start = time.perf_counter()
                run.log(step, scalars)
                times.append(time.perf_counter() - start)
            tracker.close()
            out[key] = statistics.median(times)
    return out


def main() -> None:
    """Print the step time, the cost of a logged step and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--logs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = from_dict(TrialConfig, {**TINY, "train": {**TINY["train"], "steps": args.steps}})
    every_step = from_dict(TrialConfig, {**TINY, "train": {**TINY["train"], "log_every": 1}})
    plain, tracked = [], []
    for _ in range(args.repeats):  # interleaved: the machine's load hits both alike
        plain.append(step_seconds(every_step, args.warmup))
        with tempfile.TemporaryDirectory(prefix="rope_lab_tracking_") as tmp:
            tracked.append(step_seconds(every_step, args.warmup, tracked=tmp))
    step = statistics.median(plain)
    logged, opened, closed = logged_step_seconds(cfg, args.logs)
    every = cfg.train.log_every
    runs = ", ".join(f"{a * 1e3:.2f}/{b * 1e3:.2f}" for a, b in zip(plain, tracked, strict=True))
    print(f"train step, untracked/tracked per run (ms): {runs}")
    print(f"train step (median of {args.repeats} runs): {step * 1e3:.3f} ms")
    print(
        f"train step with every step logged to both trackers: "
        f"{statistics.median(tracked) * 1e3:.3f} ms ({statistics.median(tracked) / step - 1:+.1%})"
    )
    print(f"logged step, TensorBoard + W&B offline (median of {args.logs}): {logged * 1e6:.1f} us")
    print(f"ratio per logged step: {logged / step:.3%}")
    print(f"ratio per train step at log_every={every}: {logged / step / every:.4%}")
    print(f"once per trial: open {opened:.2f} s, close {closed:.2f} s")
    work = off_thread_seconds(cfg, args.logs)
    print(
        "on the logging thread per logged step: "
        + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in work.items())
        + f" ({sum(work.values()) / step:.1%} of a step, {sum(work.values()) / step / every:.2%}"
        f" at log_every={every})"
    )


if __name__ == "__main__":
    main()

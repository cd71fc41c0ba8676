"""What NTK tracking adds to a trial's training loop, as the trial gets longer.

    .venv/bin/python -m benchmarks.ntk_tracking_cost [--steps 200 2000] [--no-record]

Tracking measures kernels at log-spaced steps (0, 1, 2, 4, ... and the last), so its cost grows
with log(steps) while training grows with steps. Each row is one smoke-sweep trial (RoPE,
width 64, depth 2, passkey, L_train 32, batch 16; `sweeps/smoke.yaml`, NTK settings included)
trained for the given number of steps through the sweep's train stage
(`rope_lab.sweep.stages`), in a fresh process, cold compilation cache, and the stage's own phase
timers: "train" is the training loop without the tracking hook, "ntk" the tracking hook
(compilation of both included, as in benchmarks/sweep_overhead.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import markdown_table, record
from rope_lab.ntk.tracking import ntk_steps

SPEC = "sweeps/smoke.yaml"


def _trial(steps: int):
    from rope_lab.sweep.spec import load_spec

    spec = load_spec(SPEC)
    cfg = next(t for t in spec.trials if t.model.position.kind == "rope" and t.model.width == 64)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps))


def _worker(steps: int, out: str) -> None:
    from rope_lab.config import to_dict
    from rope_lab.trial.pipeline import run_train_stage

    result = run_train_stage(to_dict(_trial(steps)), Path(out))
    if "phases" not in result:
        raise RuntimeError(result.get("error", result["status"]))
    print("RESULT " + json.dumps(result["phases"]), flush=True)


def measure(steps: int) -> dict[str, dict[str, float]]:
    """Phase timers of one train stage of `steps` steps, run in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ROPE_LAB_COMPILE_CACHE": "0"}
        from rope_lab.runtime.allocator import worker_env

        env.update(worker_env())  # what a sweep worker runs with
        cmd = [sys.executable, "-m", "benchmarks.ntk_tracking_cost", "--worker", str(steps), tmp]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
    return json.loads(line[7:])


def _compute(phase: dict[str, float]) -> float:
    return phase["wall_s"] - phase["compile_s"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", nargs="+", type=int, default=[200, 2000])
    parser.add_argument("--no-record", action="store_true", help="print, do not append")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(int(args.worker[0]), args.worker[1])
        return
    rows, start = [], time.perf_counter()
    for steps in args.steps:
        phases = measure(steps)
        train, ntk = phases["train"], phases["ntk"]
        kernel_steps = len(ntk_steps(_trial(steps)))
        rows.append(
            [
                steps,
                kernel_steps,
                round(train["wall_s"], 1),
                round(train["compile_s"], 1),
                round(ntk["wall_s"], 1),
                round(ntk["compile_s"], 1),
                f"{ntk['wall_s'] / train['wall_s']:.0%}",
                f"{_compute(ntk) / _compute(train):.0%}",
            ]
        )
        print(rows[-1], flush=True)
    header = [
        "steps",
        "kernel steps",
        "train s",
        "train compile s",
        "ntk s",
        "ntk compile s",
        "ntk / train",
        "ntk / train, compilation excluded",
    ]
    notes = (
        "Smoke RoPE trial (width 64, depth 2, passkey, L_train 32, batch 16, 8 probes at L_train "
        "and 4 x L_train padded to one program, output u) trained for `steps` steps in the "
        "sweep's train stage, fresh process, no compilation cache, rope-lab's malloc settings. "
        "kernel steps: tracking points (0, 1, 2, 4, ... and the last); the last one also runs "
        "the position kernel and the RoPE scalings. Times are the stage's phase timers: train = "
        "training loop without the tracking hook, ntk = the hook and the tracker's setup. "
        f"Total {time.perf_counter() - start:.0f} s."
    )
    table = markdown_table(header, rows)
    title = "NTK tracking cost against trial length"
    if args.no_record:
        print(f"\n## {title}\n\n{table}\n\n{notes}")
    else:
        record(title, table, notes=notes)


if __name__ == "__main__":
    main()

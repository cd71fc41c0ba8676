"""Train-step speed with the tuned glibc allocator (`rope_lab.runtime.allocator`) against glibc's
defaults.

glibc reads its tunables at process start, so the two settings run in two worker processes that
hold the same model, batch and jitted `make_train_step` (the workload of `benchmarks/train_step.py`:
Llama-style, depth 4, batch 16 x 256 tokens, float32). The parent asks them for one step each in
turn (interleaved, so both see the same machine load) and reports median tokens/s, the ratio, and
per-step minor page faults and kernel (system) CPU seconds from `getrusage`.

Run: `python -m benchmarks.allocator [--widths 128 256 512] [--repeats 7] [--no-record]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from benchmarks.common import markdown_table, median, record
from benchmarks.train_step import Shape
from rope_lab.runtime import allocator


def worker(width: int) -> None:
    """Child process: build the train step at `width`, then time one step per line of stdin."""
    from benchmarks.train_step import make_batch, rope_lab_side

    shape = Shape(vocab=256, width=width)
    tokens, targets = make_batch(shape)
    side = rope_lab_side(shape, tokens, targets)
    side.run()  # compile
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        before = resource.getrusage(resource.RUSAGE_SELF)
        wall = side.run()
        after = resource.getrusage(resource.RUSAGE_SELF)
        sample = {
            "wall": wall,
            "faults": after.ru_minflt - before.ru_minflt,
            "system": after.ru_stime - before.ru_stime,
            "user": after.ru_utime - before.ru_utime,
            "loss": side.loss(),
        }
        print(json.dumps(sample), flush=True)


def start(width: int, tuned: bool) -> subprocess.Popen:
    """A worker process at `width` under the tuned or the default allocator."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update(allocator.worker_env() if tuned else {allocator.OPT_OUT: "0"})
    cmd = [sys.executable, "-m", "benchmarks.allocator", "--worker", str(width)]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())  # wait until compiled
    return proc


def ask(proc: subprocess.Popen) -> dict:
    """One timed step from a worker."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("step\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> None:
    """Measure every width interleaved across the two allocator settings, print and record."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return
    if not allocator.applies():
        raise SystemExit("the allocator tuning applies to Linux with glibc only")

    rows = []
    for width in args.widths:
        procs = {"default": start(width, False), "tuned": start(width, True)}
        samples: dict[str, list[dict]] = {name: [] for name in procs}
        for round_ in range(args.repeats + 1):
            for name, proc in procs.items():
                sample = ask(proc)
                if round_:  # round 0 warms up
                    samples[name].append(sample)
        for proc in procs.values():
            proc.communicate("")
        med = {n: {k: median([s[k] for s in ss]) for k in ss[0]} for n, ss in samples.items()}
        tokens = Shape(vocab=256, width=width).tokens
        print(f"width {width}: {med}")
        rows.append(
            [
                width,
                tokens / med["default"]["wall"],
                tokens / med["tuned"]["wall"],
                med["default"]["wall"] / med["tuned"]["wall"],
                med["default"]["faults"],
                med["tuned"]["faults"],
                med["default"]["system"],
                med["tuned"]["system"],
                med["default"]["user"],
                med["tuned"]["user"],
            ]
        )
        time.sleep(1)
    header = [
        "width",
        "default tok/s",
        "tuned tok/s",
        "speed-up tuned/default",
        "default faults/step",
        "tuned faults/step",
        "default system s/step",
        "tuned system s/step",
        "default user s/step",
        "tuned user s/step",
    ]
    table = markdown_table(header, rows)
    notes = (
        f"rope_lab's train step (`benchmarks/train_step.py` workload: vocab 256, depth 4, "
        f"head_dim 32, SwiGLU, RMSNorm, RoPE, batch 16 x 256, float32) in two worker processes, "
        f"one started with glibc's default malloc settings, one with "
        f"`GLIBC_TUNABLES={allocator.tuned_tunables()}` (what `rope-lab` and sweep workers "
        f"use); medians of {args.repeats} steps each, interleaved. Faults: minor page faults per "
        f"step; system / user: kernel / user CPU seconds per step (all threads)."
    )
    if args.no_record:
        print(table)
        print(notes)
        return
    record("Allocator: tuned glibc malloc vs default, rope_lab train step", table, notes=notes)


if __name__ == "__main__":
    main()

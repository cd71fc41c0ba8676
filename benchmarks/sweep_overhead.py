"""Where a sweep's time goes: the smoke sweep broken down per trial into Ray scheduling and worker
start, XLA compilation, training compute, evaluation, NTK tracking and IO; run cold with the
persistent compilation cache (empty), again into a new folder with that cache warm, cold
without a cache, and rerun once finished.

    .venv/bin/python -m benchmarks.sweep_overhead [--trials 8] [--no-nocache]
    .venv/bin/python -m benchmarks.sweep_overhead --padding   # cold, padding off vs on

Every number comes from the stages' own phase timers (`rope_lab.runtime.timing`) and the driver's
submission times, all in the same runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import markdown_table, record
from rope_lab.sweep.runner import SweepSummary, run_sweep
from rope_lab.sweep.spec import load_spec

COLUMNS = ("wait", "compile", "train", "eval", "ntk", "io", "other")
OVERHEAD = ("compile", "io", "other")


def _noop() -> dict:
    return {"status": "done"}


def ray_costs(spec, tasks: int = 20) -> tuple[float, float]:
    """Seconds to start in-process Ray, and the median submit-to-result latency of a no-op task
    (scheduling and dispatch, on warm workers)."""
    from rope_lab.sweep.runner import RayRunner

    start = time.perf_counter()
    runner = RayRunner(spec.resources, spec.max_retries)
    runner.wait([runner.submit(_noop)])  # a worker process is up
    started = time.perf_counter() - start
    latencies = []
    for _ in range(tasks):
        t = time.perf_counter()
        runner.wait([runner.submit(_noop)])
        latencies.append(time.perf_counter() - t)
    runner.shutdown()
    return started, statistics.median(latencies)


def breakdown(stages: list[dict]) -> dict[str, float]:
    """Seconds per category over a trial's stages (compile is taken out of every phase)."""
    out = dict.fromkeys(COLUMNS, 0.0)
    for stage in stages:
        out["wait"] += stage.get("queued_s", 0.0)
        phases = stage.get("phases", {})
        accounted = 0.0
        for name, t in phases.items():
            out["compile"] += t["compile_s"]
            compute = t["wall_s"] - t["compile_s"]
            key = {"setup": "io", "finetune": "train"}.get(name, name)
            out[key] = out.get(key, 0.0) + compute
            accounted += t["wall_s"]
        out["other"] += stage.get("wall_time_s", 0.0) - accounted
    out["total"] = sum(out[c] for c in COLUMNS)
    return out


def run(spec, out_dir: Path, *, cache: Path | None) -> tuple[SweepSummary, float]:
    """Run the sweep into out_dir with the compilation cache folder `cache` (None: no cache);
    returns the summary and the wall seconds."""
    os.environ["ROPE_LAB_COMPILE_CACHE"] = "0" if cache is None else str(cache)
    start = time.perf_counter()
    summary = run_sweep(spec, out_dir, progress=False)
    return summary, time.perf_counter() - start


def rerun_cli(spec_path: str, spec, out_dir: Path) -> float:
    """Wall seconds of `rope-lab sweep run` on a finished sweep (process start included)."""
    start = time.perf_counter()
    if len(spec.trials) == len(load_spec(spec_path).trials):
        cmd = [sys.executable, "-m", "rope_lab.cli", "sweep", "run", spec_path, "--out"]
        subprocess.run([*cmd, str(out_dir), "--no-plots"], check=True, capture_output=True)
    else:  # a subset of the spec's trials: rerun in a fresh interpreter via run_sweep
        code = (
            "import dataclasses, sys; from rope_lab.sweep.spec import load_spec; "
            "from rope_lab.sweep.runner import run_sweep; s = load_spec(sys.argv[1]); "
            "s = dataclasses.replace(s, trials=s.trials[: int(sys.argv[2])]); "
            "run_sweep(s, sys.argv[3], progress=False)"
        )
        argv = [sys.executable, "-c", code, spec_path, str(len(spec.trials)), str(out_dir)]
        subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def tracking_share(summary: SweepSummary) -> str:
    """NTK tracking time (compilation included) against the training loop's own time, summed
    over the train stages, and the range over trials."""
    shares, ntk_total, train_total = [], 0.0, 0.0
    for stages in summary.stages.values():
        phases = next((s.get("phases", {}) for s in stages if s["stage"] == "train"), {})
        if "ntk" not in phases or "train" not in phases:
            continue
        ntk, train = phases["ntk"]["wall_s"], phases["train"]["wall_s"]
        shares.append(ntk / train)
        ntk_total, train_total = ntk_total + ntk, train_total + train
    if not shares:
        return "No NTK tracking in this sweep."
    return (
        f"NTK tracking adds {ntk_total / train_total:.0%} to the training loop's time over the "
        f"{len(shares)} trials ({ntk_total:.1f} s vs {train_total:.1f} s; per trial "
        f"{min(shares):.0%} to {max(shares):.0%}), compilation of both included."
    )


def table(summary: SweepSummary) -> tuple[str, dict[str, float]]:
    """Per-trial rows with each category in seconds and the overhead share of stage time."""
    rows, sums = [], dict.fromkeys((*COLUMNS, "total"), 0.0)

    def cells(name: str, b: dict[str, float]) -> list[object]:
        work = b["total"] - b["wait"]
        overhead = sum(b[c] for c in OVERHEAD)
        share = f"{overhead / work:.0%}" if work > 0 else "-"
        return [name, *(round(b[c], 1) for c in COLUMNS), round(work, 1), share]

    for trial_id, stages in summary.stages.items():
        b = breakdown(stages)
        rows.append(cells(trial_id[:34], b))
        for c in sums:
            sums[c] += b[c]
    rows.append(cells("all trials", sums))
    header = ["trial", *(f"{c} s" for c in COLUMNS), "stage time s", "overhead"]
    return markdown_table(header, rows), sums


def fixed_costs(summary: SweepSummary) -> list[float]:
    """Per trial, compile + io + other seconds (the cost that does not grow with steps)."""
    return [sum(breakdown(stages)[c] for c in OVERHEAD) for stages in summary.stages.values()]


def padding_comparison(spec, spec_path: str, *, padded_first: bool = False) -> None:
    """The spec cold (empty persistent cache each) with every evaluation length and NTK probe
    set padded to one program (`eval.pad_to_longest`, `ntk.pad_to_longest`, as smoke.yaml
    sets them) and with both off (a program per length), run one after the other in this
    process; records the fixed cost per trial of each and their ratio."""
    from rope_lab.config import replace

    unpadded = dataclasses.replace(
        spec,
        trials=[
            replace(t, **{"eval.pad_to_longest": False, "ntk.pad_to_longest": False})
            for t in spec.trials
        ],
    )
    sections, fixed, walls, compiled = [], {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("one program per length (padding off)", unpadded),
                ("padded to the longest length (as the spec sets it)", spec)]  # fmt: skip
        for i, (label, variant) in enumerate(runs[::-1] if padded_first else runs):
            summary, wall = run(variant, Path(tmp) / f"run{i}", cache=Path(tmp) / f"cache{i}")
            text, sums = table(summary)
            fixed[label], walls[label], compiled[label] = (
                fixed_costs(summary),
                wall,
                sums["compile"],
            )
            sections.append(
                f"### {label}, empty compilation cache: sweep wall {wall:.1f} s\n\n{text}"
            )
    (before, b), (after, a) = ((label, fixed[label]) for label, _ in runs)
    order = "padded first" if padded_first else "per-length first"
    mb, ma = statistics.median(b), statistics.median(a)
    notes = (
        f"Cold fixed cost per trial (compile + io + other, empty persistent compilation cache; "
        f"median over the {len(a)} trials): {mb:.1f} s with a program per length vs {ma:.1f} s "
        f"padded ({ma / mb:.2f}x), i.e. {mb / 60:.0%} vs {ma / 60:.0%} of a trial taking 60 s in "
        f"all (derived). Compile seconds summed over trials {compiled[before]:.1f} vs "
        f"{compiled[after]:.1f}; sweep wall {walls[before]:.1f} s vs {walls[after]:.1f} s. Both "
        f"runs in this process one after the other ({order}; `{spec_path}`, in-process Ray); "
        "the machine is shared (2 cores, other jobs running), so single seconds vary with its "
        "load. Columns as in the sweep_overhead tables above."
    )
    record(
        f"sweep_overhead: {spec.name}, cold fixed cost per trial, padded vs per-length programs",
        "\n\n".join(sections),
        notes=notes,
        packages=("ray", "orbax-checkpoint"),
    )


def main() -> None:
    """Run the benchmark and record its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="sweeps/smoke.yaml")
    parser.add_argument("--trials", type=int, default=None, help="first K trials only")
    parser.add_argument("--no-nocache", action="store_true", help="skip the run without cache")
    parser.add_argument(
        "--padding",
        action="store_true",
        help="only compare cold runs with evaluation / NTK padding off and on",
    )
    parser.add_argument("--padded-first", action="store_true", help="--padding, padded run first")
    args = parser.parse_args()
    spec = load_spec(args.spec)
    if args.trials:
        spec = dataclasses.replace(spec, trials=spec.trials[: args.trials])
    if args.padding or args.padded_first:
        padding_comparison(spec, args.spec, padded_first=args.padded_first)
        return
    sections, walls, summaries = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "jax_cache"
        variants: list[tuple[str, Path | None]] = [
            ("persistent compilation cache on, empty", cache),
            ("persistent compilation cache on, warm from the run above, new folder", cache),
        ]
        if not args.no_nocache:
            variants.append(("persistent compilation cache off", None))
        for i, (label, folder) in enumerate(variants):
            out_dir = Path(tmp) / f"run{i}"
            summary, wall = run(spec, out_dir, cache=folder)
            summaries.append(summary)
            text, sums = table(summary)
            walls[label] = (wall, sums)
            share = tracking_share(summary)
            sections.append(f"### {label}: sweep wall {wall:.1f} s\n\n{text}\n\n{share}")
            if "rerun" not in walls:
                walls["rerun"] = (rerun_cli(args.spec, spec, out_dir), {})
    ray_start, ray_task = ray_costs(spec)
    n_stages = sum(len(stages) for stages in summaries[0].stages.values())
    notes = [
        "Columns: wait = submission to stage start (waiting for a free worker, Ray dispatch,",
        "worker start, imports); compile = JAX tracing + lowering + XLA compile (or persistent",
        "cache retrieval) in every phase; train/eval/ntk = wall time of those phases minus their",
        "compilation; io = setup, checkpoints, model and Parquet writes; other = stage time",
        "outside the phases; stage time = everything but wait; overhead = (compile + io +",
        "other) / stage time. Trials run 2 at a time on 2 cores, so per-trial seconds add up to",
        "more than the sweep's wall time. Ray itself: starting in-process Ray took",
        f"{ray_start:.1f} s and a no-op task's submit-to-result latency is",
        f"{ray_task * 1e3:.1f} ms (median of 20), i.e. {n_stages * ray_task:.2f} s for this",
        f"sweep's {n_stages} stage tasks.",
        f"Rerun of the finished sweep (`rope-lab sweep run`, a new process): "
        f"{walls['rerun'][0]:.1f} s.",
    ]
    fixed = fixed_costs(summaries[0])
    notes.append(
        f"Fixed cost per trial (compile + io + other, cache on; median over trials "
        f"{statistics.median(fixed):.1f} s, range {min(fixed):.1f}-{max(fixed):.1f} s) would be "
        f"{statistics.median(fixed) / 60:.0%} of a trial taking 60 s in all (derived)."
    )
    cold, warm = walls[variants[0][0]], walls[variants[1][0]]
    notes.append(
        f"Empty vs warm cache: sweep wall {cold[0]:.1f} s vs {warm[0]:.1f} s; compile seconds "
        f"summed over trials {cold[1]['compile']:.1f} vs {warm[1]['compile']:.1f}."
    )
    if len(variants) == 3:
        off = walls[variants[2][0]]
        notes.append(
            f"Empty cache vs no cache: sweep wall {cold[0]:.1f} s vs {off[0]:.1f} s; compile "
            f"seconds {cold[1]['compile']:.1f} vs {off[1]['compile']:.1f}."
        )
    record(
        f"sweep_overhead: {spec.name}, {len(spec.trials)} trials, in-process Ray",
        "\n\n".join(sections),
        notes=" ".join(notes),
        packages=("ray", "orbax-checkpoint"),
    )


if __name__ == "__main__":
    main()

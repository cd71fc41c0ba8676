"""The decode stage's compiled programs and wall time: every length at one capacity (padded
prompts, `rope_lab.trial.decode_eval`) against one program per (length, protocol, scaling).

For each trial of the spec (default `sweeps/decode_passkey.yaml`) the decode stage's loop runs
(`stage_plan.decoded_scalings` x `decode_rows`, every protocol of `eval.decode.protocols`) on
the model as initialised: program counts and compile time do not depend on the weights, and
the rows of both sides must be equal (checked: the script fails on any difference). Each side
runs in its own process with the persistent compilation cache off, so every program compiles
cold; sides alternate over `--rounds`. Reported per trial and side: generation programs (the
jitted generation's cache size, `decode_eval.compiled_programs`), every XLA compilation the
stage triggered (`jax.monitoring` backend-compile events, small eager ops included), compile
seconds (`rope_lab.runtime.timing`) and wall seconds, and the ratio of the sides' walls.

    .venv/bin/python -m benchmarks.decode_programs [--spec sweeps/decode_passkey.yaml]
        [--trials N] [--rounds 1] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def worker(spec_path: str, index: int, padded: bool) -> dict:
    """The decode stage of trial `index` of the spec in this process: its rows, wall and
    compile seconds, generation programs and XLA compilations."""
    import jax

    from rope_lab.model.factory import make_model
    from rope_lab.runtime.timing import compile_seconds
    from rope_lab.sweep.spec import load_spec
    from rope_lab.tasks import task_from_config
    from rope_lab.trial.decode_eval import compiled_programs, decode_rows
    from rope_lab.trial.stage_plan import decoded_scalings

    compiles = {"n": 0}

    def count(event: str, duration_secs: float, **_: object) -> None:
        if event == BACKEND_COMPILE:
            compiles["n"] += 1

    cfg = load_spec(spec_path).trials[index]
    model = make_model(cfg)
    task = task_from_config(cfg.task)
    jax.block_until_ready(model)
    jax.monitoring.register_event_duration_secs_listener(count)
    compiled, start = compile_seconds(), time.perf_counter()
    rows = []
    for scaling in decoded_scalings(cfg):
        rows += decode_rows(
            model, task, cfg, step=0, scaling=scaling, protocols=cfg.eval.decode.protocols,
            padded=padded,
        )  # fmt: skip
    wall = time.perf_counter() - start
    programs = compiled_programs()["padded" if padded else "per_length"]
    return {
        "trial": cfg.trial_id,
        "wall_s": wall,
        "compile_s": compile_seconds() - compiled,
        "programs": programs,
        "xla_compiles": compiles["n"],
        "rows": rows,
    }


def _side(spec: str, index: int, padded: bool) -> dict:
    env = {**os.environ, "ROPE_LAB_COMPILE_CACHE": "0", "JAX_ENABLE_COMPILATION_CACHE": "0"}
    argv = [sys.executable, "-m", "benchmarks.decode_programs", "--spec", spec]
    argv += ["--worker", str(index), "--padded", str(int(padded))]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run both sides per trial, check their rows are equal, record the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="sweeps/decode_passkey.yaml")
    parser.add_argument("--trials", type=int, default=None, help="first N trials only")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--padded", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.spec, args.worker, bool(args.padded))))
        return

    from benchmarks.common import markdown_table, record
    from rope_lab.sweep.spec import load_spec

    n = len(load_spec(args.spec).trials)
    n = n if args.trials is None else min(n, args.trials)
    started = time.perf_counter()
    rows, totals = [], {"per_length": [0.0, 0, 0, 0.0], "padded": [0.0, 0, 0, 0.0]}
    for index in range(n):
        runs: dict[str, list[dict]] = {"per_length": [], "padded": []}
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for padded in order:
                runs["padded" if padded else "per_length"].append(_side(args.spec, index, padded))
        before, after = runs["per_length"][0], runs["padded"][0]
        for side in ("per_length", "padded"):
            for run in runs[side]:
                if run["rows"] != before["rows"]:
                    raise SystemExit(f"{before['trial']}: {side} rows differ from per-length's")
        wall = {s: statistics.median(r["wall_s"] for r in runs[s]) for s in runs}
        comp = {s: statistics.median(r["compile_s"] for r in runs[s]) for s in runs}
        for s in runs:
            t = totals[s]
            t[0] += wall[s]
            t[1] += runs[s][0]["programs"]
            t[2] += runs[s][0]["xla_compiles"]
            t[3] += comp[s]
        rows.append(
            [before["trial"], len(before["rows"]),
             before["programs"], after["programs"],
             before["xla_compiles"], after["xla_compiles"],
             round(comp["per_length"], 1), round(comp["padded"], 1),
             round(wall["per_length"], 1), round(wall["padded"], 1),
             round(wall["padded"] / wall["per_length"], 3)]
        )  # fmt: skip
        print(rows[-1], flush=True)
    b, a = totals["per_length"], totals["padded"]
    rows.append(
        [f"all {n} trials", sum(r[1] for r in rows), b[1], a[1], b[2], a[2], round(b[3], 1),
         round(a[3], 1), round(b[0], 1), round(a[0], 1), round(a[0] / b[0], 3)]
    )  # fmt: skip
    header = [
        "trial", "decode rows", "programs before", "programs after", "XLA compiles before",
        "XLA compiles after", "compile s before", "compile s after", "wall s before",
        "wall s after", "after / before",
    ]  # fmt: skip
    table = markdown_table(header, rows)
    print(table)
    notes = (
        f"The decode stage of each trial of `{args.spec}` (every decoded scaling x "
        "`eval.decode.protocols`, `decode_rows`), on the model as initialised, before = one "
        "program per (length, protocol, scaling) (`decode_rows(padded=False)`, the stage as "
        "it was), after = every length at the longest length's capacity and answer length "
        "(`padded=True`, the stage now). Programs: the jitted generation's compiled programs "
        "(`decode_eval.compiled_programs`); XLA compiles: every backend compilation during "
        "the stage (jax.monitoring; eager host-side ops included); compile s: tracing, "
        "lowering and compiling (`rope_lab.runtime.timing`). Each side in its own process, "
        "persistent compilation cache off; "
        f"{args.rounds} round(s), sides alternating, wall = median. The rows of both sides "
        "are equal (checked). The machine is shared (2 cores, other jobs running): single "
        f"seconds vary with its load; the ratio compares the same run. Total "
        f"{time.perf_counter() - started:.0f} s."
    )
    if not args.no_record:
        record(
            "Decode stage: one capacity for every length vs one program per (length, protocol, "
            "scaling)",
            table,
            notes=notes,
        )


if __name__ == "__main__":
    main()

"""Seed ensembles: k seeds as one vmapped program (`rope_lab.trial.ensemble`) against k sequential
single-seed trials (`rope_lab.trial.train`'s step), same config, same machine, same run.

Model: a smoke-like RoPE trial (width 64, depth 2, head_dim 16, passkey with vocabulary 32 and
needle 4, L_train 64, batch 16), float32, on the default device.

- sequential: the jitted single-seed step `train()` runs (`make_train_step`, data sampled
  inside, buffers donated), compiled ONCE and reused for all k seeds' parameter sets; one
  measurement is `steps` steps of seed 0, then of seed 1, ... (k x steps calls, the data key
  folded per step outside the program as `train()` does).
- ensemble: `make_ensemble_step` for k seeds (compiled once per k); one measurement is `steps`
  calls, each updating all k seeds.

Timed to `block_until_ready` of the last step, interleaved (one measurement of each candidate
in turn), after a warm-up round; medians reported. Compile time is measured separately: the
first call minus the median steady step, i.e. tracing + XLA compilation. Caveat for the
end-to-end column: `train()` builds a new jitted step per call, so k sequential trials trace
and compile k times (a persistent compilation cache, as the sweep runner sets, turns the later
compiles into disk loads but still traces); the benchmark's sequential side compiles once.

Run: `python -m benchmarks.ensemble [--quick] [--ks 1 4 8] [--steps N] [--repeats N]`.

`--pipeline` instead measures packed seeds as a sweep runs them (`pack_seeds: true`): the train
stages of k trials of the same model (seeds 0..k-1, `--pipeline-steps` steps, one checkpoint at
the end, no NTK tracking) through `rope_lab.trial.pipeline`, unpacked (`run_train_stage` per
trial, one after another: what a one-CPU sweep worker does) against packed (one
`run_pack_train`). Each side runs in its own Python process with its own empty compilation
cache (cold: a first sweep), then again in a second process on that cache (warm: a rerun into a
new folder or a later sweep with the same shapes); timed from the first stage's start to the
last one's end (imports and process start excluded). The two sides alternate, `--repeats`
rounds; the ratio column compares the medians of the same run.
`python -m benchmarks.ensemble --pipeline [--pipeline-ks 4 8] [--pipeline-steps 200]
[--pipeline-repeats 2] [--no-record]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from benchmarks.common import interleaved, markdown_table, median, record
from rope_lab.config import (
    ModelConfig,
    PositionConfig,
    TaskConfig,
    TrainConfig,
    TrialConfig,
    replace,
)
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import trainable
from rope_lab.tasks import task_from_config
from rope_lab.trial.ensemble import EnsembleInputs, init_ensemble, make_ensemble_step, seed_keys
from rope_lab.trial.optimizer import make_optimizer
from rope_lab.trial.train import TraceGuard, make_train_step

END_TO_END_STEPS = 200  # smoke-sweep trial length, for the derived end-to-end column


def bench_trial() -> TrialConfig:
    """The benchmarked trial: width 64, depth 2, L 64, batch 16, passkey (needle 4, vocab 32)."""
    return TrialConfig(
        name="bench_ensemble",
        model=ModelConfig(width=64, depth=2, head_dim=16, position=PositionConfig(kind="rope")),
        task=TaskConfig(name="passkey", vocab_size=32, params=(("needle_length", 4),)),
        train=TrainConfig(length=64, batch_size=16, steps=100_000, warmup_steps=10),
    )


def _block(tree: Any) -> None:
    jax.block_until_ready(eqx.filter(tree, eqx.is_array))


class Sequential:
    """k single-seed states advanced one seed after another by one shared compiled step."""

    def __init__(self, cfg: TrialConfig, step_fn: Callable, seeds: list[int]):
        self.cfg, self.step_fn, self.t = cfg, step_fn, 0
        self.task = task_from_config(cfg.task)
        self.operands = self.task.operands()
        self.states = []
        for seed in seeds:
            model = make_model(replace(cfg, **{"train.seed": seed}))
            params, static = eqx.partition(model, trainable(model))
            opt = make_optimizer(cfg.train, model)
            data_key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
            self.states.append([static, params, opt.init(params), data_key])

    def run(self, steps: int) -> float:
        """Seconds for `steps` steps of every seed, one seed after another."""
        start = time.perf_counter()
        for state in self.states:
            static, params, opt_state, data_key = state
            for t in range(self.t, self.t + steps):
                key = jax.random.fold_in(data_key, t)
                params, opt_state, _ = self.step_fn(static, params, opt_state, key, self.operands)
            state[1], state[2] = params, opt_state
        _block([s[1] for s in self.states])
        self.t += steps
        return time.perf_counter() - start


class Ensemble:
    """k seeds stacked and advanced together by the vmapped step."""

    def __init__(self, cfg: TrialConfig, seeds: list[int]):
        self.t = 0
        task = task_from_config(cfg.task)
        models = init_ensemble(cfg, seeds)
        optimizer = make_optimizer(cfg.train, models)
        self.params, self.static = eqx.partition(models, trainable(models))
        self.opt_state = eqx.filter_vmap(optimizer.init)(self.params)
        self.guard = TraceGuard(f"ensemble_step_k{len(seeds)}")
        self.step_fn = make_ensemble_step(
            cfg, task, optimizer, length=cfg.train.length, guard=self.guard
        )
        self.data_keys = seed_keys(seeds, 1)
        self.operands = task.operands()

    def run(self, steps: int) -> float:
        """Seconds for `steps` ensemble steps (each one step of every seed)."""
        start = time.perf_counter()
        for t in range(self.t, self.t + steps):
            inputs = EnsembleInputs(
                self.static, self.data_keys, jnp.asarray(t, jnp.int32), self.operands
            )
            self.params, self.opt_state, _ = self.step_fn(inputs, self.params, self.opt_state)
        _block(self.params)
        self.guard.check()
        self.t += steps
        return time.perf_counter() - start


def pipeline_trials(k: int, steps: int) -> list[TrialConfig]:
    """The benchmarked trial (`bench_trial`) at seeds 0..k-1, `steps` steps, NTK off."""
    cfg = replace(
        bench_trial(),
        **{"train.steps": steps, "train.log_every": 10, "ntk.enabled": False},
    )
    return [replace(cfg, **{"train.seed": s}) for s in range(k)]


def pipeline_worker(mode: str, k: int, steps: int, run_dir: str) -> dict:
    """One side of `--pipeline` in this process: the k train stages unpacked or packed."""
    from rope_lab.config import to_dict
    from rope_lab.trial.pipeline import run_pack_train, run_train_stage

    configs = [to_dict(t) for t in pipeline_trials(k, steps)]
    start = time.perf_counter()
    if mode == "packed":
        results = list(run_pack_train(configs, run_dir)["members"].values())
    else:
        results = [run_train_stage(c, run_dir) for c in configs]
    wall = time.perf_counter() - start
    bad = [r for r in results if r["status"] != "done"]
    if bad:
        raise RuntimeError(f"{mode}: {bad[0].get('error', bad[0]['status'])}")
    compile_s = sum(sum(p["compile_s"] for p in r["phases"].values()) for r in results)
    if mode == "packed":  # every member carries the whole task's phases
        compile_s /= len(results)
    losses = [r["final_loss"] for r in results]
    return {"wall_s": wall, "compile_s": compile_s, "final_loss": losses}


def _run_worker(mode: str, k: int, steps: int, cache: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_pack_") as run_dir:
        env = {**os.environ, "ROPE_LAB_COMPILE_CACHE": cache}
        cmd = [sys.executable, "-m", "benchmarks.ensemble", "--pipeline-worker", mode]
        cmd += ["--pipeline-ks", str(k), "--pipeline-steps", str(steps), "--run-dir", run_dir]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def pipeline_main(ks: list[int], steps: int, repeats: int, record_it: bool) -> None:
    """Packed against unpacked train stages through the pipeline, cold and warm (module doc)."""
    cfg = bench_trial()
    tokens = cfg.train.batch_size * cfg.train.length * steps  # per trial
    rows = []
    for k in ks:
        runs: dict[tuple[str, str], list[dict]] = {}
        for r in range(repeats):
            order = ("unpacked", "packed") if r % 2 == 0 else ("packed", "unpacked")
            for mode in order:
                with tempfile.TemporaryDirectory(prefix="bench_pack_cache_") as cache:
                    for cache_state in ("cold", "warm"):
                        runs.setdefault((mode, cache_state), []).append(
                            _run_worker(mode, k, steps, cache)
                        )
        for mode in ("unpacked", "packed"):  # the same numbers, to float rounding
            losses = [x["final_loss"] for x in runs[(mode, "cold")]]
            print(mode, k, "final losses", losses[0])
        for cache_state in ("cold", "warm"):
            walls = {
                m: median([x["wall_s"] for x in runs[(m, cache_state)]])
                for m in ("unpacked", "packed")
            }
            comp = {
                m: median([x["compile_s"] for x in runs[(m, cache_state)]])
                for m in ("unpacked", "packed")
            }
            rate = {m: k * tokens / walls[m] for m in walls}
            paired = zip(
                runs[("unpacked", cache_state)], runs[("packed", cache_state)], strict=True
            )
            each = " / ".join(f"{u['wall_s'] / p['wall_s']:.2f}" for u, p in paired)
            rows.append(
                [
                    k,
                    cache_state,
                    walls["unpacked"],
                    walls["packed"],
                    rate["unpacked"],
                    rate["packed"],
                    rate["packed"] / rate["unpacked"],
                    each,
                    comp["unpacked"],
                    comp["packed"],
                ]
            )
    header = [
        "k",
        "compile cache",
        "unpacked wall (s)",
        "packed wall (s)",
        "unpacked train tok/s",
        "packed train tok/s",
        "packed / unpacked",
        "each round",
        "unpacked compile (s)",
        "packed compile (s)",
    ]
    table = markdown_table(header, rows)
    notes = (
        f"k train stages of the benchmarked trial (width 64, depth 2, RoPE, passkey, L 64, "
        f"batch 16; seeds 0..k-1; {steps} steps, one checkpoint at the end, no NTK tracking) "
        "through `rope_lab.trial.pipeline`, on "
        f"{jax.default_backend()}: unpacked = `run_train_stage` of each trial one after "
        "another in one process; packed = one `run_pack_train` (one vmapped program). Wall from "
        "the first stage's start to the last one's end, including checkpoints, model files and "
        "compilation; tokens/s = k x steps x batch x L / wall. Each side in its own process "
        "with an empty compilation cache (cold), then a second process on that cache (warm). "
        f"Median of {repeats} rounds, sides alternating (each round: that round's ratio); "
        "compile = summed JAX compile seconds "
        "(`Phases`). Single numbers vary with the shared machine's load; the ratio compares "
        "medians of the same run."
    )
    if not record_it:
        print(table)
        print(notes)
        return
    record(
        "Packed seeds: k train stages packed vs unpacked through the pipeline", table, notes=notes
    )


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, measure every k interleaved, print and record the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8], help="ensemble sizes")
    parser.add_argument("--steps", type=int, default=10, help="steps per seed per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved measurements")
    parser.add_argument("--quick", action="store_true", help="k 1 and 4, 3 steps, no record")
    parser.add_argument("--no-record", action="store_true", help="print, don't append RESULTS.md")
    parser.add_argument(
        "--pipeline", action="store_true", help="packed vs unpacked train stages (module doc)"
    )
    parser.add_argument("--pipeline-ks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--pipeline-steps", type=int, default=200)
    parser.add_argument("--pipeline-repeats", type=int, default=2)
    parser.add_argument("--pipeline-worker", choices=["packed", "unpacked"], help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pipeline_worker:
        result = pipeline_worker(
            args.pipeline_worker, args.pipeline_ks[0], args.pipeline_steps, args.run_dir
        )
        print(json.dumps(result))
        return
    if args.pipeline:
        pipeline_main(
            args.pipeline_ks, args.pipeline_steps, args.pipeline_repeats, not args.no_record
        )
        return
    if args.quick:
        args.ks, args.steps, args.repeats = [1, 4], 3, 2

    cfg = bench_trial()
    tokens = cfg.train.batch_size * cfg.train.length  # per seed per step
    seq_guard = TraceGuard("train_step")
    probe = make_model(cfg)
    seq_step = make_train_step(
        cfg,
        task_from_config(cfg.task),
        make_optimizer(cfg.train, probe),
        length=cfg.train.length,
        guard=seq_guard,
    )
    del probe

    candidates: dict[str, Callable[[], float]] = {}
    first_call: dict[str, float] = {}
    for k in args.ks:
        seeds = list(range(k))
        seq, ens = Sequential(cfg, seq_step, seeds), Ensemble(cfg, seeds)
        if not first_call:  # the shared single-seed step compiles once, at its first call
            first_call["seq"] = Sequential(cfg, seq_step, [0]).run(1)
        first_call[f"ens{k}"] = ens.run(1)
        candidates[f"seq{k}"] = lambda s=seq: s.run(args.steps)
        candidates[f"ens{k}"] = lambda e=ens: e.run(args.steps)

    times = interleaved(candidates, repeats=args.repeats, warmup=1)
    seq_guard.check()

    rows = []
    one_step_seq = median(times[f"seq{args.ks[0]}"]) / (args.ks[0] * args.steps)
    compile_seq = first_call["seq"] - one_step_seq
    for k in args.ks:
        t_seq, t_ens = median(times[f"seq{k}"]), median(times[f"ens{k}"])
        per_seed_seq = tokens * args.steps / t_seq
        per_seed_ens = tokens * args.steps / t_ens
        compile_ens = first_call[f"ens{k}"] - t_ens / args.steps
        # Derived: k trials of END_TO_END_STEPS steps, sequential via train() (k compiles) vs
        # one ensemble (one compile).
        e2e_seq = k * (compile_seq + END_TO_END_STEPS * t_seq / (k * args.steps))
        e2e_ens = compile_ens + END_TO_END_STEPS * t_ens / args.steps
        rows.append(
            [
                k,
                per_seed_seq,
                per_seed_ens,
                per_seed_ens / per_seed_seq,
                per_seed_seq * k,
                per_seed_ens * k,
                compile_seq,
                compile_ens,
                e2e_seq,
                e2e_ens,
            ]
        )
    header = [
        "k",
        "seq tok/s per seed",
        "ens tok/s per seed",
        "ens / seq",
        "seq tok/s total",
        "ens tok/s total",
        "seq compile (s, once)",
        "ens compile (s, per k)",
        f"{END_TO_END_STEPS}-step wall seq (s, k compiles)",
        f"{END_TO_END_STEPS}-step wall ens (s)",
    ]
    table = markdown_table(header, rows)
    notes = (
        f"Trial: width 64, depth 2, head_dim 16, RoPE, passkey (vocab 32, needle 4), L 64, "
        f"batch 16 ({tokens} tokens per seed per step), float32, {jax.default_backend()}. "
        f"Median of {args.repeats} interleaved measurements of {args.steps} steps per seed "
        "(after one warm-up round). Sequential = one compiled single-seed step reused for the "
        "k seeds one after another; ensemble = one vmapped step over the k seeds. Throughput "
        "excludes compilation; compile = first call minus one steady step (tracing + XLA). "
        f"The {END_TO_END_STEPS}-step columns are derived from these numbers: sequential as "
        f"k train() calls, each paying the compile (train() builds a new jitted step per call), "
        "vs one ensemble compile; with a persistent compilation cache the sequential side pays "
        "less. Single measurements vary with the shared machine's load; the ratio column "
        "compares candidates measured in the same rounds."
    )
    if args.quick or args.no_record:
        print(table)
        print(notes)
        return
    record("Seed ensembles: vmapped k seeds vs k sequential trials", table, notes=notes)


if __name__ == "__main__":
    main()

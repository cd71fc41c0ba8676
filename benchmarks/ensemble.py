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
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, measure every k interleaved, print and record the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8], help="ensemble sizes")
    parser.add_argument("--steps", type=int, default=10, help="steps per seed per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved measurements")
    parser.add_argument("--quick", action="store_true", help="k 1 and 4, 3 steps, no record")
    parser.add_argument("--no-record", action="store_true", help="print, don't append RESULTS.md")
    args = parser.parse_args(argv)
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

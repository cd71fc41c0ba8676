"""Rematerialisation (`train.remat`) against keeping every activation, in the same run.

For each length, rope_lab's jitted train step (`make_train_step`: sampling, loss, gradient,
clipped AdamW) of one small trial under each policy: XLA's estimate of the compiled step's
memory (`memory_analysis()`: arguments + temporaries, and temporaries alone) and the step time
(interleaved rounds, medians), as ratios against `none`; next to them the ratio of `sweep
plan`'s estimate (`memory.train_step_bytes`).

`attention` (keep the blocked kernel's output and log-sum-exp) runs only with `--attention
blocked`, the one path it applies to.

Run: `python -m benchmarks.remat [--lengths 1024 2048] [--width 64] [--depth 4] [--batch 1]
[--attention auto] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import equinox as eqx
import jax

from benchmarks.common import interleaved, markdown_table, median, record
from rope_lab.config import (
    ModelConfig,
    PositionConfig,
    TaskConfig,
    TrainConfig,
    TrialConfig,
    replace,
    validate,
)
from rope_lab.model.factory import make_model
from rope_lab.model.memory import train_step_bytes
from rope_lab.model.transformer import count_params, trainable
from rope_lab.tasks import task_from_config
from rope_lab.trial.config import REMAT
from rope_lab.trial.optimizer import make_optimizer
from rope_lab.trial.train import TraceGuard, make_train_step


def trial(args: argparse.Namespace, length: int, remat: str) -> TrialConfig:
    """The benchmark's trial: RoPE, passkey (vocab 32), head dim 16, float32."""
    model = ModelConfig(
        width=args.width,
        depth=args.depth,
        head_dim=16,
        position=PositionConfig(kind="rope"),
        attention=args.attention,
    )
    cfg = TrialConfig(
        name="bench-remat",
        model=model,
        task=TaskConfig(name="passkey", vocab_size=32),
        train=TrainConfig(length=length, batch_size=args.batch, steps=1000, warmup_steps=10),
    )
    return validate(replace(cfg, **{"train.remat": remat, "eval.length_multipliers": (1.0,)}))


def compiled_step(cfg: TrialConfig) -> tuple[Callable[[], float], dict[str, int]]:
    """A timer of one train step of `cfg` and XLA's memory estimate of its compiled program
    (`args`, `temp` bytes), plus `plan`: `train_step_bytes` of the trial."""
    model = make_model(cfg)
    task = task_from_config(cfg.task)
    optimizer = make_optimizer(cfg.train, model)
    params, static = eqx.partition(model, trainable(model))
    state = {"params": params, "opt": optimizer.init(params)}
    length = cfg.train.length
    step = make_train_step(cfg, task, optimizer, length=length, guard=TraceGuard("b"))
    operands = task.operands()
    lowered = step.lower(static, params, state["opt"], jax.random.PRNGKey(0), operands)
    analysis = lowered.compile().compiled.memory_analysis()
    plan = train_step_bytes(
        cfg.model, 32, length, cfg.train.batch_size, count_params(model), remat=cfg.train.remat
    )
    memory = {
        "args": analysis.argument_size_in_bytes,
        "temp": analysis.temp_size_in_bytes,
        "plan": plan,
    }
    keys = iter(range(10**9))

    def run() -> float:
        key = jax.random.PRNGKey(next(keys))
        start = time.perf_counter()
        params, opt, metrics = step(static, state["params"], state["opt"], key, operands)
        jax.block_until_ready((params, opt, metrics))
        state.update(params=params, opt=opt)
        return time.perf_counter() - start

    return run, memory


def main() -> None:
    """Measure every policy at every length; append the table to RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--attention", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    policies = [r for r in REMAT if r != "attention" or args.attention == "blocked"]
    rows = []
    for length in args.lengths:
        timers, memory = {}, {}
        for remat in policies:
            timers[remat], memory[remat] = compiled_step(trial(args, length, remat))
        times = interleaved(timers, repeats=args.repeats, warmup=1)
        ms = {name: 1e3 * median(t) for name, t in times.items()}
        none = memory["none"]
        for remat in policies:
            mem = memory[remat]
            rows.append(
                [
                    length,
                    remat,
                    (mem["args"] + mem["temp"]) / 2**20,
                    (mem["args"] + mem["temp"]) / (none["args"] + none["temp"]),
                    mem["temp"] / none["temp"],
                    mem["plan"] / none["plan"],
                    mem["plan"] / (mem["args"] + mem["temp"]),
                    ms[remat],
                    ms[remat] / ms["none"],
                ]
            )
    header = [
        "L",
        "remat",
        "XLA MiB",
        "XLA / none",
        "XLA temp / none",
        "plan / none",
        "plan / XLA",
        "step ms",
        "step / none",
    ]
    notes = (
        f"RoPE, passkey (vocab 32), width {args.width}, depth {args.depth}, head dim 16, batch "
        f"{args.batch}, float32, model.attention {args.attention} (on CPU auto runs the "
        "reference path up to L 2048, the blocked kernel beyond; remat `attention` runs with "
        "blocked only); rope_lab's jitted train step. "
        "XLA: `memory_analysis()` of the compiled step, arguments + temporaries; plan: "
        "`memory.train_step_bytes` (what `sweep plan` reports). Step time: "
        f"{args.repeats} interleaved rounds after 1 warm-up round, medians."
    )
    record("Rematerialisation: train.remat against none", markdown_table(header, rows), notes=notes)


if __name__ == "__main__":
    main()

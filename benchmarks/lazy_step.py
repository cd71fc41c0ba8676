"""Lazy (linearised) against rich training steps and evaluation forwards, in the same run.

`train.regime: lazy` trains f(theta_0) + J(theta_0)(theta - theta_0) (`rope_lab.model.lazy`):
its forward is one `jax.jvp` of the network (primal and tangent), its backward the transpose of
that jvp. Both sides run rope_lab's own jitted train step (`make_train_step`, the step `train()`
runs: sampling, loss, gradient, clipped AdamW) on the same trial (RoPE, passkey, float32; reference
attention on both sides, as `auto` picks on CPU at these lengths) and the eval forward
(`token_losses` of one batch, jitted), timed interleaved, medians reported. The ratios
lazy / rich are the factors `rope_lab.sweep.plan.estimate_cost` applies to a lazy trial's
training (and fine-tuning) and evaluation FLOPs.

Run: `python -m benchmarks.lazy_step [--widths 64 128] [--depth 2] [--length 64] [--batch 16]
[--repeats 7]`.
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
from rope_lab.model.positions.modules import batch_positions
from rope_lab.model.transformer import trainable
from rope_lab.tasks import task_from_config
from rope_lab.trial.objective import token_losses
from rope_lab.trial.optimizer import make_optimizer
from rope_lab.trial.train import TraceGuard, make_train_step


def trial(width: int, depth: int, length: int, batch: int, regime: str) -> TrialConfig:
    """The benchmark's trial: RoPE, passkey (vocab 32), head dim 16, reference attention."""
    model = ModelConfig(
        width=width,
        depth=depth,
        head_dim=16,
        position=PositionConfig(kind="rope"),
        attention="reference",
    )
    cfg = TrialConfig(
        name="bench-lazy",
        model=model,
        task=TaskConfig(name="passkey", vocab_size=32),
        train=TrainConfig(length=length, batch_size=batch, steps=1000, warmup_steps=10),
    )
    return validate(replace(cfg, **{"train.regime": regime, "eval.length_multipliers": (1.0,)}))


def step_timer(cfg: TrialConfig) -> Callable[[], float]:
    """One timed train step of `cfg` (parameters carried from step to step)."""
    model = make_model(cfg)
    task = task_from_config(cfg.task)
    optimizer = make_optimizer(cfg.train, model)
    params, static = eqx.partition(model, trainable(model))
    state = {"params": params, "opt": optimizer.init(params)}
    step = make_train_step(cfg, task, optimizer, length=cfg.train.length, guard=TraceGuard("b"))
    operands = task.operands()
    keys = iter(range(10**9))

    def run() -> float:
        key = jax.random.PRNGKey(next(keys))
        start = time.perf_counter()
        params, opt, metrics = step(static, state["params"], state["opt"], key, operands)
        jax.block_until_ready((params, opt, metrics))
        state.update(params=params, opt=opt)
        return time.perf_counter() - start

    return run


def forward_timer(cfg: TrialConfig) -> Callable[[], float]:
    """One timed evaluation forward (per-token losses of one batch at L_train)."""
    model = make_model(cfg)
    task = task_from_config(cfg.task)
    n, length = cfg.train.batch_size, cfg.train.length
    batch = task.sample_from(task.operands("eval"), n, length, key=jax.random.PRNGKey(0))
    positions = batch_positions(cfg, key=jax.random.PRNGKey(1), batch_size=n, length=length)
    forward = eqx.filter_jit(token_losses)

    def run() -> float:
        start = time.perf_counter()
        jax.block_until_ready(forward(model, batch, positions))
        return time.perf_counter() - start

    return run


def main() -> None:
    """Time rich and lazy steps and forwards per width; append the table to RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for width in args.widths:
        cfgs = {r: trial(width, args.depth, args.length, args.batch, r) for r in ("rich", "lazy")}
        candidates = {f"step {r}": step_timer(c) for r, c in cfgs.items()}
        candidates |= {f"forward {r}": forward_timer(c) for r, c in cfgs.items()}
        times = interleaved(candidates, repeats=args.repeats, warmup=2)
        ms = {name: 1e3 * median(t) for name, t in times.items()}
        rows.append(
            [
                width,
                ms["step rich"],
                ms["step lazy"],
                ms["step lazy"] / ms["step rich"],
                ms["forward rich"],
                ms["forward lazy"],
                ms["forward lazy"] / ms["forward rich"],
            ]
        )
    header = [
        "width",
        "step rich ms",
        "step lazy ms",
        "step lazy / rich",
        "forward rich ms",
        "forward lazy ms",
        "forward lazy / rich",
    ]
    notes = (
        f"RoPE, passkey (vocab 32), depth {args.depth}, head dim 16, L {args.length}, batch "
        f"{args.batch}, float32, reference attention on both sides; rope_lab's jitted train step "
        "(sampling, loss, gradient, clipped AdamW) and a jitted evaluation forward (per-token "
        f"losses), {args.repeats} interleaved rounds after 2 warm-up rounds, medians. A lazy "
        "forward is one jax.jvp of the network (primal + tangent); its step adds the transpose "
        "of that jvp."
    )
    record(
        "Lazy (linearised) vs rich train step and forward",
        markdown_table(header, rows),
        notes=notes,
    )


if __name__ == "__main__":
    main()

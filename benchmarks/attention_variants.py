"""What each attention variant (`model.attention_fn`) costs in the blocked kernel, against softmax.

One attention layer (RoPE, `model.attention: blocked`, float32, batch 1) per variant: a training
step's forward and backward (`value_and_grad` of the sum of the layer's output, gradients of the
layer's weights and of its input) at each length, and an evaluation-only forward at a long
length. For each: the median time of the compiled program (rounds interleaved over the variants,
so a busy machine slows them alike) and XLA's temporary-buffer estimate of it
(`memory_analysis()`), each also as a ratio to softmax at the same length. `temp / L/2`: a
variant's temporaries over its own at the previous length (about 2 when memory is linear in L).

Run: `python -m benchmarks.attention_variants [--lengths 1024 2048 4096 8192] [--eval-length
32768] [--heads 4] [--head-dim 32] [--repeats 3] [--long-repeats 1] [--no-eval-time]`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from benchmarks.common import interleaved, markdown_table, median, record
from rope_lab.config import ModelConfig, PositionConfig
from rope_lab.model.attention_layer import Attention
from rope_lab.model.positions import make_position_encoding
from rope_lab.registry import ATTENTION_FNS

LONG = 8192  # from this length on, `--long-repeats` rounds instead of `--repeats`


def variants() -> list[str]:
    """Every registered `model.attention_fn`, softmax first."""
    import rope_lab.model.attention_fns  # noqa: F401  (registers the variants)

    names = list(ATTENTION_FNS.names())
    return ["softmax", *(n for n in names if n != "softmax")]


def compiled_layer(
    args: argparse.Namespace, variant: str, length: int, *, train: bool
) -> tuple[Callable[[], float], int]:
    """A timer of one call of the compiled program (`train`: value and gradients of the sum of
    one attention layer's output (1, L, D); else its forward) and XLA's temporary bytes."""
    cfg = ModelConfig(
        width=args.heads * args.head_dim,
        depth=1,
        head_dim=args.head_dim,
        position=PositionConfig(kind="rope"),
        attention="blocked",
        attention_fn=variant,
    )
    key = jax.random.PRNGKey(0)
    layer = Attention(cfg, train_length=length, key=key)
    encoding = make_position_encoding(cfg, max_length=length, train_length=length, key=key)
    params, static = eqx.partition(layer, eqx.is_inexact_array)
    x = jax.random.normal(jax.random.PRNGKey(1), (1, length, cfg.width), jnp.float32)
    positions = jnp.arange(length)[None, :]

    def loss(params, x):
        return eqx.combine(params, static)(x, positions, encoding).sum()

    fn = jax.value_and_grad(loss, argnums=(0, 1)) if train else loss
    compiled = jax.jit(fn).lower(params, x).compile()
    analysis = compiled.memory_analysis()
    if analysis is None:
        raise SystemExit(f"{jax.default_backend()}: XLA gives no memory_analysis()")
    temp = analysis.temp_size_in_bytes

    def run() -> float:
        start = time.perf_counter()
        jax.block_until_ready(compiled(params, x))
        return time.perf_counter() - start

    return run, temp


def measure(
    args: argparse.Namespace, names: list[str], length: int, *, train: bool, repeats: int
) -> dict[str, tuple[float, int]]:
    """Median ms and temporary bytes of every variant at `length` (`repeats` interleaved rounds,
    after one warm-up round when more than one; none with `repeats` 0: time nan)."""
    timers, temps = {}, {}
    for name in names:
        timers[name], temps[name] = compiled_layer(args, name, length, train=train)
    if repeats == 0:
        return {name: (float("nan"), temps[name]) for name in names}
    times = interleaved(timers, repeats=repeats, warmup=1 if repeats > 1 else 0)
    return {name: (1e3 * median(times[name]), temps[name]) for name in names}


def rows_of(
    mode: str, length: int, results: dict[str, tuple[float, int]], previous: dict[str, int]
) -> list[list[object]]:
    """Table rows of one length: ms and temp MiB, each also over softmax's, and temp over the
    variant's own at the previous length (`previous`, empty at the first)."""
    ms0, temp0 = results["softmax"]
    rows: list[list[object]] = []
    for name, (ms, temp) in results.items():
        growth: object = temp / previous[name] if name in previous else "-"
        rows.append([mode, length, name, ms, ms / ms0, temp / 2**20, temp / temp0, growth])
    return rows


def main() -> None:
    """Measure every variant; append the table to RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--eval-length", type=int, default=32768)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long-repeats", type=int, default=1)
    parser.add_argument("--no-eval-time", action="store_true", help="only its memory estimate")
    args = parser.parse_args()
    names = variants()
    start = time.perf_counter()
    rows: list[list[object]] = []
    previous: dict[str, int] = {}
    for length in args.lengths:
        repeats = args.long_repeats if length >= LONG else args.repeats
        results = measure(args, names, length, train=True, repeats=repeats)
        rows += rows_of("train step", length, results, previous)
        previous = {name: temp for name, (_, temp) in results.items()}
        print(f"L {length}: {time.perf_counter() - start:.0f} s", flush=True)
    eval_repeats = 0 if args.no_eval_time else 1
    results = measure(args, names, args.eval_length, train=False, repeats=eval_repeats)
    rows += rows_of("eval forward", args.eval_length, results, {})
    header = ["mode", "L", "attention_fn", "ms", "ms / softmax", "XLA temp MiB",
              "temp / softmax", "temp / L/2"]  # fmt: skip
    notes = (
        f"One attention layer, `model.attention: blocked`, RoPE, {args.heads} heads x head_dim "
        f"{args.head_dim}, batch 1, float32, on {jax.default_backend()}. Train step: "
        "`value_and_grad` of the sum of the layer's output (weights and input); eval forward: "
        f"the layer alone. Time: medians of {args.repeats} interleaved rounds ({args.long_repeats} "
        f"from L {LONG}; one call in the eval forward), after one warm-up round when more than "
        "one; XLA temp: `memory_analysis().temp_size_in_bytes` of the compiled program. "
        f"Total {time.perf_counter() - start:.0f} s."
    )
    record(
        "Attention variants in the blocked kernel: cost against softmax",
        markdown_table(header, rows),
        notes=notes,
    )


if __name__ == "__main__":
    main()

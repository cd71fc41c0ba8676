"""Long-context cost: peak memory and time of one forward and one training step against L.

The model is the issue's probe: batch 1, width 128, depth 2, head_dim 32, vocabulary 256, RoPE or
ALiBi, float32. Every (encoding, attention implementation, mode, L) runs in a fresh process, so
peak memory is that process's own: `peak RSS rise` is the maximum resident set size minus the
resident size after imports (compilation included); `XLA temp` is the compiled program's
temporary-buffer estimate (`memory_analysis`), the part that grows with attention.

Next to each measurement:
- `/ L D`: peak RSS rise over 4 L D bytes (one float32 (L, D) activation). The rise includes a
  fixed few hundred MB of runtime and compiler, so a ratio that falls or stays flat with L
  means memory grows at most linearly; one that grows means worse than linear.
- `/ attn bound`: time over the causal-attention FLOP bound: the FLOPs of QK^T and AV over
  the causal triangle (L^2 D per matmul per layer; a training step counts 7 such matmuls,
  the forward's two, the flash backward's recomputed QK^T and its four gradient matmuls),
  at the float32 2048^3 matmul rate measured in the same process right after the timing.

Run: `python -m benchmarks.long_context [--lengths 1024 ... 32768] [--kinds rope alibi]
[--impls reference blocked] [--reference-max 16384] [--repeats 3] [--no-record]`.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings
from typing import Any

WIDTH, DEPTH, HEAD_DIM, VOCAB = 128, 2, 32, 256
MATMUL_N = 2048


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (ru_maxrss is in KB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def attention_flops(length: int, mode: str) -> float:
    """Causal-attention matmul FLOPs of one sequence through the model (see module docstring)."""
    per_matmul = length * length * WIDTH  # 2 L^2 D / 2: multiply-adds over the causal triangle
    matmuls = 2 if mode == "forward" else 7
    return DEPTH * matmuls * per_matmul


def worker(kind: str, impl: str, mode: str, length: int, repeats: int) -> dict[str, Any]:
    """Measure one case in this process; returns the row as a dict."""
    base = rss_mb()
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from benchmarks.common import matmul_peak_flops, median
    from benchmarks.train_step import FixedBatchTask
    from rope_lab.config import ModelConfig, PositionConfig, TrainConfig, TrialConfig
    from rope_lab.model.transformer import Transformer, trainable
    from rope_lab.trial.optimizer import make_optimizer
    from rope_lab.trial.train import TraceGuard, make_train_step

    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    base = rss_mb()
    model_cfg = ModelConfig(
        width=WIDTH,
        depth=DEPTH,
        head_dim=HEAD_DIM,
        position=PositionConfig(kind=kind),
        attention=impl,
    )
    model = Transformer(
        model_cfg, VOCAB, train_length=length, max_length=length, key=jax.random.PRNGKey(0)
    )
    tokens = jax.random.randint(jax.random.PRNGKey(1), (1, length), 0, VOCAB)
    if mode == "forward":
        arrays, static = eqx.partition(model, eqx.is_array)
        forward = jax.jit(lambda a, t: eqx.combine(a, static)(t))
        compiled = forward.lower(arrays, tokens).compile()
        temp = compiled.memory_analysis().temp_size_in_bytes

        def run() -> float:
            start = time.perf_counter()
            jax.block_until_ready(compiled(arrays, tokens))
            return time.perf_counter() - start

    else:
        cfg = TrialConfig(
            name="long", model=model_cfg, train=TrainConfig(length=length, batch_size=1)
        )
        optimizer = make_optimizer(cfg.train, model)
        params, static = eqx.partition(model, trainable(model))
        state = {"params": params, "opt": optimizer.init(params)}
        operands = (tokens, jnp.roll(tokens, -1, 1), jnp.ones(tokens.shape, bool))
        step = make_train_step(
            cfg, FixedBatchTask(VOCAB), optimizer, length=length, guard=TraceGuard("long")
        )
        temp = -1  # the donated, jitted step is not lowered separately here

        def run() -> float:
            start = time.perf_counter()
            params, opt, metrics = step(
                static, state["params"], state["opt"], jax.random.PRNGKey(2), operands
            )
            jax.block_until_ready((params, opt, metrics))
            state.update(params=params, opt=opt)
            return time.perf_counter() - start

    first = run()
    times = [run() for _ in range(repeats)]
    rate = matmul_peak_flops(MATMUL_N)
    seconds = median(times)
    return {
        "kind": kind,
        "impl": impl,
        "mode": mode,
        "L": length,
        "seconds": seconds,
        "first_s": first,
        "peak_rss_rise_mb": peak_rss_mb() - base,
        "xla_temp_mb": temp / 2**20 if temp >= 0 else float("nan"),
        "matmul_gflops": rate / 1e9,
        "attn_bound_s": attention_flops(length, mode) / rate,
    }


def run_case(kind: str, impl: str, mode: str, length: int, repeats: int) -> dict[str, Any]:
    """One case in a fresh process (its own peak memory); a failure becomes a row saying so."""
    cmd = [sys.executable, "-m", "benchmarks.long_context", "--worker"]
    cmd += [kind, impl, mode, str(length), str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:120]
        return {"kind": kind, "impl": impl, "mode": mode, "L": length, "error": tail}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run every case in its own process, print and record the table."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--worker":
        kind, impl, mode, length, repeats = args[1:6]
        print(json.dumps(worker(kind, impl, mode, int(length), int(repeats))))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768]
    )
    parser.add_argument("--kinds", nargs="+", default=["rope", "alibi"])
    parser.add_argument("--impls", nargs="+", default=["reference", "blocked"])
    parser.add_argument("--modes", nargs="+", default=["forward", "train"])
    parser.add_argument("--reference-max", type=int, default=16384, help="longest reference L")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-record", action="store_true")
    opts = parser.parse_args(args)

    from benchmarks.common import markdown_table, record

    rows = []
    started = time.perf_counter()
    for mode in opts.modes:
        for kind in opts.kinds:
            for length in opts.lengths:
                for impl in opts.impls:
                    if impl == "reference" and length > opts.reference_max:
                        continue
                    row = run_case(kind, impl, mode, length, opts.repeats)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["mode"], r["kind"], r["impl"], r["L"], r["error"], *["-"] * 6])
            continue
        ld_mb = 4 * r["L"] * WIDTH / 2**20
        table.append(
            [
                r["mode"],
                r["kind"],
                r["impl"],
                r["L"],
                r["seconds"],
                r["seconds"] / r["attn_bound_s"],
                r["peak_rss_rise_mb"],
                r["peak_rss_rise_mb"] / ld_mb,
                r["xla_temp_mb"],
                r["matmul_gflops"],
                r["first_s"],
            ]
        )
    header = [
        "mode",
        "encoding",
        "attention",
        "L",
        "s",
        "/ attn bound",
        "peak RSS rise MB",
        "/ L D",
        "XLA temp MB",
        "matmul GFLOP/s",
        "first call s",
    ]
    notes = (
        f"Batch 1, width {WIDTH}, depth {DEPTH}, head_dim {HEAD_DIM}, vocab {VOCAB}, float32; "
        f"train = one `make_train_step` step (forward, backward, clip, AdamW). Each row is a "
        f"fresh process; s = median of {opts.repeats} calls after the first (compile) call. "
        f"`/ attn bound`: time over the causal-attention matmul FLOPs (forward 2 L^2 D per layer, "
        f"train 7 L^2 D) at the 2048^3 float32 matmul rate measured in the same process. "
        f"`/ L D`: peak RSS rise over one float32 (L, D) activation (4 L D bytes). "
        f"Total {time.perf_counter() - started:.0f} s."
    )
    if opts.no_record:
        print(markdown_table(header, table))
        print(notes)
    else:
        record(
            "Long context: memory and time against L", markdown_table(header, table), notes=notes
        )


if __name__ == "__main__":
    main()

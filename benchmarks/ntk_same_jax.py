"""Sequence NTK: rope_lab against neural-tangents' `empirical_ntk_fn`, both on rope_lab's jax.

    .venv/bin/pip install --no-deps neural-tangents==0.6.5
    .venv/bin/python -m benchmarks.ntk_same_jax [--quick] [--no-record]

neural-tangents is imported through `benchmarks/nt_compat.py` (moved jax names put back; no
TensorFlow), so both candidates run on the same jax, XLA and model: rope_lab's Transformer of
`benchmarks/ntk.py` (RoPE, depth 2, head_dim 32, vocab 32, float32, matmul precision
"highest"). rope_lab: the public `sequence_kernel(model, X, X, output=...)`. neural-tangents:
`empirical_ntk_fn(f, vmap_axes=0, implementation=...)` jitted and called as K(X, None, params),
with f the batched model outputs on the trainable parameter pytree: output "u" gives one scalar
per sequence, F = sum_i <u, logits_i> / sqrt(V) (trace_axes=()); output "trace" gives the V
summed logits (trace_axes=(-1,), which neural-tangents averages over V, as rope_lab does).
Every neural-tangents kernel is checked against rope_lab's before it is timed (max relative
difference in the table). JACOBIAN_CONTRACTION runs at every size; AUTO, NTK_VECTOR_PRODUCTS
and STRUCTURED_DERIVATIVES (slower or far more memory in benchmarks/RESULTS.md) only where the
Jacobian is small. Each case runs in a fresh worker (`benchmarks.ntk.run_case`): times are
medians of interleaved repeats after a first (compiling) call. Workers run under the malloc
settings `rope-lab` uses (`rope_lab/runtime/allocator.py`) unless `--allocator measure` asks for
glibc's defaults with a 64 KiB mmap threshold, as benchmarks/ntk.py uses to measure peak
memory: there every buffer over 64 KiB is mapped and page-faulted afresh, which costs the
candidate with more temporaries more time.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from benchmarks.ntk import (
    DEPTH,
    MEM_BUDGET_GB,
    SLOW_S,
    VOCAB,
    Case,
    Outcome,
    _emit,
    _measured,
    _ms,
    bench_inputs,
    jacobian_gb,
    n_params,
    run_case,
)

IMPLEMENTATIONS = ("JACOBIAN_CONTRACTION", "AUTO", "NTK_VECTOR_PRODUCTS", "STRUCTURED_DERIVATIVES")
SHORT = {"JACOBIAN_CONTRACTION": "JC", "AUTO": "AUTO", "NTK_VECTOR_PRODUCTS": "NVP"}
SHORT["STRUCTURED_DERIVATIVES"] = "SD"
ALL_UP_TO = 16 * 64 * n_params(64)  # N L P of the cases where every implementation runs


def implementations(case: Case) -> tuple[str, ...]:
    """The neural-tangents implementations run for a case."""
    small = case.n * case.length * n_params(case.width) <= ALL_UP_TO
    return IMPLEMENTATIONS if small else IMPLEMENTATIONS[:1]


def _worker(case: Case) -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.common import interleaved
    from benchmarks.nt_compat import load_empirical
    from rope_lab.model.transformer import trainable
    from rope_lab.ntk.kernels import sequence_kernel

    empirical = load_empirical()
    model, u, tokens, _ = bench_inputs(case)
    params, static = eqx.partition(model, trainable(model))
    u_dev, tokens_dev, scale = jnp.asarray(u), jnp.asarray(tokens), 1.0 / math.sqrt(VOCAB)

    def apply_fn(p, batch):
        """neural-tangents' f(params, x): (N,) for output u, (N, V) for "trace"."""

        def one(tok):
            logits = eqx.combine(p, static)(tok)
            if case.output == "u":
                return jnp.sum(logits @ u_dev) * scale
            return jnp.sum(logits, axis=0)

        return jax.vmap(one)(batch)

    sync = jax.block_until_ready
    output = u if case.output == "u" else "trace"
    rope_fn = lambda: sequence_kernel(model, tokens, tokens, output=output)
    start = time.perf_counter()
    k_rope = np.asarray(sync(rope_fn()), np.float64)
    first = time.perf_counter() - start
    _emit(params=sum(x.size for x in jax.tree.leaves(params)), rope_first=first)
    candidates = {"rope_lab": _measured(rope_fn, sync)}
    gb = jacobian_gb(case)
    for name in implementations(case):
        if gb > MEM_BUDGET_GB:
            _emit(**{f"{name}_status": f"not run: Jacobian {gb:.1f} GB"})
            continue
        kernel_fn = empirical.empirical_ntk_fn(
            apply_fn,
            trace_axes=() if case.output == "u" else (-1,),
            vmap_axes=0,
            implementation=empirical.NtkImplementation[name],
        )
        jitted = jax.jit(kernel_fn)
        call = lambda fn=jitted: fn(tokens_dev, None, params)
        start = time.perf_counter()
        try:
            k_nt = np.asarray(sync(call()), np.float64)
        except Exception as e:  # recorded per implementation; the others still run
            _emit(**{f"{name}_status": f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"})
            continue
        first = time.perf_counter() - start
        err = float(np.abs(k_nt - k_rope).max() / np.abs(k_rope).max())
        _emit(**{f"{name}_first": first, f"{name}_err": err})
        if first > SLOW_S:
            _emit(**{f"{name}_status": f"too slow: first call {first:.0f} s"})
            continue
        candidates[name] = _measured(call, sync)
    runs = interleaved(candidates, repeats=case.repeats, warmup=0)
    for name, samples in runs.items():
        times, peak = [t for t, _ in samples], max(m for _, m in samples)
        _emit(**{f"{name}_times": times, f"{name}_peak_mb": peak})


def cases(quick: bool, outputs: list[str]) -> list[Case]:
    """Sequence-kernel cases: (N, L, width) grid per output; repeats shrink with the work."""

    def reps(n: int, length: int, width: int) -> int:
        return 5 if n * length * n_params(width) < 5e8 else 3

    grid = (
        [(16, 64, 64), (32, 256, 128)]
        if quick
        else [(n, length, w) for w in (64, 128, 256) for length in (64, 256) for n in (16, 32, 64)]
    )
    out = []
    if "u" in outputs:
        out += [Case("sequence", "u", *g, repeats=reps(*g)) for g in grid]
    if "trace" in outputs:
        out += [Case("sequence", "trace", *g, repeats=2) for g in [(16, 64, 64), (16, 64, 128)]]
    return out


HEADER = [
    "output",
    "N",
    "L",
    "width",
    "P",
    "rope_lab ms",
    *[f"{SHORT[name]} ms / rope_lab" for name in IMPLEMENTATIONS],
    "peak RSS rise MB (rope_lab / JC)",
    "repeats",
]


def row(o: Outcome, memory: bool = True) -> list[object]:
    """One table row: neural-tangents times as multiples of rope_lab's (> 1: rope_lab faster)."""
    v, c = o.values, o.case
    rope = _ms(v.get("rope_lab_times", []))
    cells: list[object] = [c.output, c.n, c.length, c.width, v.get("params", n_params(c.width))]
    cells.append(rope if v.get("rope_lab_times") else o.error or "?")
    for name in IMPLEMENTATIONS:
        if v.get(f"{name}_times"):
            ms = _ms(v[f"{name}_times"])
            cells.append(f"{ms:.4g} / {ms / rope:.2f}x (diff {v[f'{name}_err']:.0e})")
        else:
            cells.append(v.get(f"{name}_status", "-" if name not in implementations(c) else "?"))
    peak_nt = v.get("JACOBIAN_CONTRACTION_peak_mb", math.nan)
    memory_cell = f"{v.get('rope_lab_peak_mb', math.nan):.0f} / {peak_nt:.0f}"
    cells.append(memory_cell if memory else "-")
    return [*cells, len(v.get("rope_lab_times", []))]


NOTES = (
    "Sequence kernel K(X, X) of N random sequences of length L, rope_lab's Transformer (RoPE, "
    f"depth {DEPTH}, head_dim 32, GELU MLP x4, LayerNorm, vocab {VOCAB}, float32, matmul "
    "precision highest); P = trainable parameters. Both sides on the same jax/XLA in the same "
    "worker process: neural-tangents 0.6.5 imported through benchmarks/nt_compat.py. Cells: "
    "neural-tangents' median ms / its multiple of rope_lab's median (above 1x: rope_lab is "
    "faster), interleaved repeats after a compiling first call; diff = max|K_nt - K_rope_lab| "
    "/ max|K_rope_lab|. JC = JACOBIAN_CONTRACTION, NVP = NTK_VECTOR_PRODUCTS, "
    "SD = STRUCTURED_DERIVATIVES (AUTO, NVP and SD only at the smallest "
    f"size); not run where one side's Jacobian would exceed {MEM_BUDGET_GB:g} GB or a first "
    f"call took over {SLOW_S:g} s. Peak RSS rise: as in benchmarks/ntk.py."
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two sizes")
    parser.add_argument("--outputs", nargs="+", default=["u", "trace"], choices=["u", "trace"])
    parser.add_argument("--no-record", action="store_true", help="print, do not append")
    parser.add_argument(
        "--allocator",
        choices=["tuned", "measure"],
        default="tuned",
        help="rope-lab's malloc settings (times) or glibc defaults (times and peak memory)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(Case(**json.loads(args.worker)))
        return
    tuned = args.allocator == "tuned"

    from benchmarks.common import markdown_table, record

    start = time.perf_counter()
    outcomes = []
    for case in cases(args.quick, args.outputs):
        outcomes.append(run_case(case, module="benchmarks.ntk_same_jax", tuned=tuned))
        cells = row(outcomes[-1], memory=not tuned)
        print(f"{case.label}: {outcomes[-1].seconds:.0f} s {cells}", flush=True)
    table = markdown_table(HEADER, [row(o, memory=not tuned) for o in outcomes])
    malloc = (
        "Workers under rope-lab's malloc settings (rope_lab/runtime/allocator.py), where the "
        "resident "
        "set keeps its peak, so no peak RSS rise (run with --allocator measure for it)."
        if tuned
        else "Workers under glibc's default malloc, mmap threshold 64 KiB (peak RSS measurable)."
    )
    notes = f"{NOTES} {malloc} Total {time.perf_counter() - start:.0f} s."
    title = (
        "NTK sequence kernel: rope_lab vs neural-tangents, same jax"
        + (" (quick)" if args.quick else "")
        + ("" if tuned else ", glibc default malloc")
    )
    if args.no_record:
        print(f"\n## {title}\n\n{table}\n\n{notes}")
    else:
        record(title, table, notes=notes, packages=("neural-tangents",))


if __name__ == "__main__":
    main()

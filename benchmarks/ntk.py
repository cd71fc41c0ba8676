"""Empirical-NTK cost: `rope_lab.ntk.kernels` against a plain `jax.jacrev` + einsum reference.

    .venv/bin/python -m benchmarks.ntk [--quick] [--outputs u trace] [--no-record]

Model: rope_lab's Transformer (RoPE, depth 2, head_dim 32, GELU MLP x4, LayerNorm, vocab 32,
float32), built with `rope_lab.model.transformer.Transformer`. The rope_lab side is nothing but
calls of the
public `sequence_kernel` / `position_kernel` (unchunked in the grid, so both sides hold all
gradient features at once; `chunk_size` 8 as in training-time tracking for the tracking step).

Reference (written here, independent of `rope_lab.ntk.kernels`): the trainable parameters are
flattened
with `ravel_pytree`; per sequence, `jax.jacrev` of the outputs F w.r.t. the flat vector gives
the full Jacobian, vmapped over the sequences (single-example jacrev, then vmap: the batched
"jacrev of the whole batch" costs N^2 backward passes and is the pattern XLA CPU miscompiles on
jax 0.10.2, see docs/design.md), then an einsum. Outputs:
- "u": F(x) = sum_i <u, logits_i(x)> / sqrt(V), u a fixed Gaussian (V,) as `NTKConfig.output
  = "random"`; one scalar per sequence (J: N x P);
- "trace": F_c(x) = sum_i logits_ic(x) / sqrt(V), V outputs (J: N x V x P);
- position kernel: f_i(x) = <u, logits_i(x)> / sqrt(V) per position (J: N x L x P).
Kernels in the grid are K(X, X) for one set X of N random sequences: both sides compute the
features once (rope_lab detects equal arguments; the reference reuses J). Everything runs under
`jax.default_matmul_precision("highest")`, as rope_lab does.

Each case runs in a fresh worker subprocess (`--worker`), so an out-of-memory or a hang kills
only that case. Time: first call (trace + compile + run) and the median of interleaved repeats;
"compile" is first call minus median. Peak memory: the rise of the worker's resident set during
a timed call, the largest over the repeats (VmHWM after minus VmRSS before, with the
high-water mark reset through /proc/self/clear_refs and glibc's mmap threshold fixed at 64 KiB
so freed buffers go back to the OS); the reference also reports XLA's own buffer-assignment
estimate (`memory_analysis()`: argument + output + temp). References that would need more than
MEM_BUDGET_GB for their Jacobians, or whose first call exceeds 60 s, are recorded as such and
not run (further).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

VOCAB = 32
DEPTH = 2
MEM_BUDGET_GB = 5.0  # shared machine: never allocate more than this for one side's Jacobians
SLOW_S = 60.0  # a reference call slower than this is recorded as too slow
WORKER_TIMEOUT_S = 300.0
# the headline size; chunk_size 8 = NTKConfig.chunk_size's default (checked in workers)
TRACKING = {"n": 32, "length": 64, "width": 128, "multiplier": 4, "chunk_size": 8}
SIZES = [(n, length, w) for w in (64, 128, 256) for length in (64, 256) for n in (16, 32, 64)]
POSITION = (16, 64, 64)  # the one grid size where the position kernel is run (N L^2 P work)


@dataclass(frozen=True)
class Case:
    kernel: str  # "sequence", "position" or "step" (one tracking step)
    output: str  # "u" or "trace"
    n: int
    length: int
    width: int
    repeats: int = 3
    chunk_size: int | None = None
    method: str = "api"  # step only: "api" (sequence_kernel calls), "tracker", "tracker-padded"

    @property
    def label(self) -> str:
        return f"{self.kernel} {self.output} N={self.n} L={self.length} w={self.width}"


def n_params(width: int) -> int:
    """Trainable scalars of the benchmark model (cross-checked by the worker)."""
    block = 12 * width * width + 4 * width  # q k v o, up and down (x4), two LayerNorms
    return DEPTH * block + 2 * VOCAB * width + 2 * width


def jacobian_gb(case: Case) -> float:
    """Size of the reference's Jacobian of one side, in GB."""
    rows = case.n * (
        VOCAB if case.output == "trace" else case.length if case.kernel == "position" else 1
    )
    return rows * n_params(case.width) * 4 / 1e9


# --------------------------------------------------------------------------- worker side


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measured(fn, sync):
    """A callable timing one call of fn: (seconds, rise of the resident set in MB)."""

    def call():
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current VmRSS
            before = _status_mb("VmRSS")
        except OSError:
            before = math.nan
        start = time.perf_counter()
        sync(fn())  # the result is dropped
        seconds = time.perf_counter() - start
        return seconds, _status_mb("VmHWM") - before

    return call


def contract(j1, j2, position: bool):
    """The reference's einsum of two full Jacobians: rows (N, ..., P), flattened per sequence
    (sequence kernel (N1, N2): sum over outputs and parameters) or per (sequence, position)
    (position kernel (N1, N2, L1, L2)); one contracting axis, as a 2-D einsum (an einsum with
    two contracting axes, "ncp,mcp->nm", ran 3x slower on jax 0.4.23's XLA CPU)."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    n1, n2 = j1.shape[0], j2.shape[0]
    if not position:
        return jnp.einsum("na,ma->nm", j1.reshape(n1, -1), j2.reshape(n2, -1), precision=hi)
    (l1, p), l2 = j1.shape[1:], j2.shape[1]
    k = jnp.einsum("ap,bp->ab", j1.reshape(n1 * l1, p), j2.reshape(n2 * l2, p), precision=hi)
    return k.reshape(n1, l1, n2, l2).transpose(0, 2, 1, 3)


def _emit(**kw) -> None:
    print("RESULT " + json.dumps(kw), flush=True)


def bench_inputs(case: Case):
    """The benchmark model (matmul precision set to highest) and its inputs: model, readout u
    (V,), tokens (N, L), long tokens (N, 4 L); the same for every worker of a case."""
    import jax
    import numpy as np

    from rope_lab.config import ModelConfig, PositionConfig
    from rope_lab.model.transformer import Transformer, count_params

    jax.config.update("jax_default_matmul_precision", "highest")
    cfg = ModelConfig(width=case.width, depth=DEPTH, position=PositionConfig(kind="rope"))
    train_length = TRACKING["length"] if case.kernel == "step" else case.length
    model = Transformer(
        cfg, VOCAB, train_length=train_length, max_length=4096, key=jax.random.PRNGKey(0)
    )
    assert count_params(model) == n_params(case.width), (count_params(model), n_params(case.width))
    rng = np.random.default_rng(1)
    u = rng.normal(size=VOCAB).astype(np.float32)
    tokens = rng.integers(0, VOCAB, (case.n, case.length)).astype(np.int32)
    long = rng.integers(0, VOCAB, (case.n, case.length * TRACKING["multiplier"])).astype(np.int32)
    return model, u, tokens, long


def _worker(case: Case) -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    from benchmarks.common import interleaved
    from rope_lab.config import NTKConfig
    from rope_lab.model.transformer import trainable
    from rope_lab.ntk.kernels import (
        feature_kernels,
        gradient_features,
        position_kernel,
        sequence_kernel,
        total_kernel,
    )

    assert NTKConfig().chunk_size == TRACKING["chunk_size"] and NTKConfig().output == "random"
    model, u, tokens, long = bench_inputs(case)
    output = u if case.output == "u" else "trace"

    params, static = eqx.partition(model, trainable(model))
    flat, unravel = ravel_pytree(params)
    scale = 1.0 / math.sqrt(VOCAB)
    u_dev = jnp.asarray(u)

    def outputs(theta, tok):
        """The reference's outputs of one sequence: (), (V,) or (L,)."""
        logits = eqx.combine(unravel(theta), static)(tok)
        if case.kernel == "position":
            return logits @ u_dev * scale
        if case.output == "trace":
            return jnp.sum(logits, axis=0) * scale
        return jnp.sum(logits @ u_dev) * scale

    def jacobian(theta, tok):
        return jax.vmap(jax.jacrev(outputs), in_axes=(None, 0))(theta, tok)

    def reference(theta, tok1, tok2, symmetric: bool):
        j1 = jacobian(theta, tok1)
        j2 = j1 if symmetric else jacobian(theta, tok2)
        return contract(j1, j2, case.kernel == "position")

    sync = lambda x: jax.block_until_ready(x)
    if case.kernel == "step":
        chunk = case.chunk_size

        def api_fn():
            k_train = sequence_kernel(model, tokens, tokens, output=output, chunk_size=chunk)
            k_cross = sequence_kernel(model, long, tokens, output=output, chunk_size=chunk)
            return k_train, k_cross

        def tracker_fn():
            """What NTKTracker does per step: one gradient pass per probe set (the long probes
            with two masks: all and the unseen tail) and host contractions; "tracker-padded"
            pads the short probes to the long length so one program serves both
            (ntk.pad_to_longest)."""
            l_short, l_long = tokens.shape[1], long.shape[1]
            if case.method == "tracker-padded":
                masks = np.zeros((2, l_long), np.float32)
                masks[0, :l_short] = 1.0
                padded = np.pad(tokens, ((0, 0), (0, l_long - l_short)))
                short = gradient_features(
                    model, padded, masks=masks, output=output, chunk_size=chunk
                ).combine([[1.0, 0.0]])
            else:
                short = gradient_features(model, tokens, output=output, chunk_size=chunk)
            tail = (np.arange(l_long) >= l_short).astype(np.float32)
            long_f = gradient_features(
                model,
                long,
                masks=np.stack([np.ones_like(tail), tail]),
                output=output,
                chunk_size=chunk,
            )
            k_train = total_kernel(feature_kernels(short, short))
            k_cross_tail = total_kernel(feature_kernels(long_f, short))
            return k_train, k_cross_tail[0::2]

        rope_fn = api_fn if case.method == "api" else tracker_fn

        l_short = tokens.shape[1]

        def long_outputs(theta, tok):  # (2,): F over all positions, F over the unseen tail
            per_position = eqx.combine(unravel(theta), static)(tok) @ u_dev * scale
            return jnp.stack([jnp.sum(per_position), jnp.sum(per_position[l_short:])])

        def cross_and_tail(theta, long_tokens, short_tokens):  # (N_long, 2, N_short)
            j_long = jax.vmap(jax.jacrev(long_outputs), in_axes=(None, 0))(theta, long_tokens)
            j_short = jacobian(theta, short_tokens)
            n_long = j_long.shape[0]
            k = contract(j_long.reshape(n_long * 2, -1), j_short, False)
            return k.reshape(n_long, 2, -1)[:, 0]  # the tail rows are computed, not compared

        ref_sym = jax.jit(lambda th, t: reference(th, t, t, True))
        if case.method == "api":  # sequence_kernel computes no tail kernel: neither does jacrev
            ref_cross = jax.jit(lambda th, a, b: reference(th, a, b, False))
        else:
            ref_cross = jax.jit(cross_and_tail)
        ref_args = [(ref_sym, (flat, tokens)), (ref_cross, (flat, long, tokens))]
    else:
        kernel_fn = position_kernel if case.kernel == "position" else sequence_kernel
        rope_fn = lambda: kernel_fn(model, tokens, tokens, output=output)
        ref_args = [(jax.jit(lambda th, t: reference(th, t, t, True)), (flat, tokens))]
    _emit(params=int(flat.size))

    # rope_lab's first call before anything of the reference: it survives a reference that dies
    start = time.perf_counter()
    k_rope = sync(rope_fn())
    _emit(rope_first=time.perf_counter() - start)
    rope_timed = _measured(rope_fn, sync)

    gb = jacobian_gb(case)
    if gb > MEM_BUDGET_GB:
        _emit(ref_status=f"not run: Jacobian {gb:.1f} GB > {MEM_BUDGET_GB:g} GB budget")
        runs = [rope_timed() for _ in range(case.repeats)]
        _emit(rope_times=[t for t, _ in runs], rope_peak_mb=max(m for _, m in runs))
        return
    start = time.perf_counter()
    compiled, xla_mb = [], 0.0
    for fn, args in ref_args:
        c = fn.lower(*args).compile()
        m = c.memory_analysis()
        if m is not None:
            total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            xla_mb = max(xla_mb, total / 2**20)
        compiled.append((c, args))
    if xla_mb > MEM_BUDGET_GB * 1e9 / 2**20:
        _emit(ref_status=f"not run: XLA estimate {xla_mb / 1024:.1f} GiB", ref_xla_mb=xla_mb)
        runs = [rope_timed() for _ in range(case.repeats)]
        _emit(rope_times=[t for t, _ in runs], rope_peak_mb=max(m for _, m in runs))
        return
    ref_fn = lambda: [c(*args) for c, args in compiled]
    k_ref = sync(ref_fn())
    ref_first = time.perf_counter() - start
    pairs = zip(jax.tree.leaves(k_rope), k_ref, strict=True)
    err = max(
        float(np.abs(np.float64(a) - np.float64(b)).max() / np.abs(np.float64(b)).max())
        for a, b in ((np.asarray(a), np.asarray(b)) for a, b in pairs)
    )
    _emit(ref_first=ref_first, ref_xla_mb=xla_mb, max_rel_err=err)
    del k_ref, k_rope
    if ref_first > SLOW_S:
        _emit(ref_status=f"too slow: first call {ref_first:.0f} s > {SLOW_S:g} s")
        runs = [rope_timed() for _ in range(case.repeats)]
        _emit(rope_times=[t for t, _ in runs], rope_peak_mb=max(m for _, m in runs))
        return

    runs = interleaved(
        {"rope": rope_timed, "ref": _measured(ref_fn, sync)}, repeats=case.repeats, warmup=0
    )
    _emit(
        rope_times=[t for t, _ in runs["rope"]],
        ref_times=[t for t, _ in runs["ref"]],
        rope_peak_mb=max(m for _, m in runs["rope"]),
        ref_peak_mb=max(m for _, m in runs["ref"]),
        ref_status="ok",
    )


# --------------------------------------------------------------------------- parent side


@dataclass
class Outcome:
    case: Case
    values: dict = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


def run_case(
    case: Case, module: str = "benchmarks.ntk", limit_gb: float = 14.0, tuned: bool = False
) -> Outcome:
    """Run one case in a fresh worker (`python -m module --worker`); keep whatever it reported
    before dying. The address-space cap turns a runaway allocation into a failed case rather
    than a call on the shared machine's OOM killer. The worker runs under glibc's default
    malloc with a 64 KiB mmap threshold, so freed buffers leave the resident set and its peak
    can be measured, or, with `tuned`, under the allocator `rope-lab` itself uses (faster, but
    the resident set then keeps its peak: no memory measurement)."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}  # glibc's defaults
    if tuned:
        from rope_lab.runtime.allocator import worker_env

        env.update(worker_env())
    else:
        env.update(MALLOC_MMAP_THRESHOLD_="65536")
    env.update(PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", module, "--worker", json.dumps(asdict(case))]
    limit = int(limit_gb * 2**30)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = Outcome(case)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT_S,
            preexec_fn=cap,
            check=False,
        )
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        stderr, rc = "", None
        out.error = f"worker timed out after {WORKER_TIMEOUT_S:g} s"
    out.seconds = time.perf_counter() - start
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            out.values.update(json.loads(line[7:]))
    if rc not in (0, None):
        tail = [s for s in stderr.strip().splitlines() if s.strip()][-1:] or [""]
        why = "out of memory?" if rc < 0 or "RESOURCE_EXHAUSTED" in stderr else ""
        out.error = f"worker exit {rc} {why} {tail[0][:160]}".strip()
    if out.error and "ref_times" not in out.values and "ref_status" not in out.values:
        out.values["ref_status"] = out.error
    return out


def _ms(xs) -> float:
    import statistics

    return 1e3 * statistics.median(xs) if xs else float("nan")


def summary(o: Outcome) -> str:
    v = o.values
    rope, ref = _ms(v.get("rope_times", [])), _ms(v.get("ref_times", []))
    text = f"rope_lab {rope:.0f} ms, jacrev {ref:.0f} ms"
    if "max_rel_err" in v:
        text += f", max rel err {v['max_rel_err']:.1e}"
    if v.get("ref_status", "ok") != "ok":
        text += f" [{v['ref_status']}]"
    return text + (f" ERROR {o.error}" if o.error else "")


def row(o: Outcome, with_case: bool = True) -> list[object]:
    v, c = o.values, o.case
    rope, ref = _ms(v.get("rope_times", [])), _ms(v.get("ref_times", []))
    ok = v.get("ref_status") == "ok"
    compile_rope = v.get("rope_first", math.nan) - rope / 1e3
    compile_ref = v.get("ref_first", math.nan) - ref / 1e3 if ok else math.nan
    cells: list[object] = [c.n, c.length, c.width, v.get("params", n_params(c.width))]
    if not with_case:
        cells = [c.method, c.chunk_size if c.chunk_size else "all"]
    cells += [
        rope,
        ref if ok else v.get("ref_status", o.error or "?"),
        ref / rope if ok else "-",
        f"{compile_rope:.1f} / {compile_ref:.1f}" if ok else f"{compile_rope:.1f} / -",
        f"{v.get('rope_peak_mb', math.nan):.0f} / {v.get('ref_peak_mb', math.nan):.0f}",
        f"{v['ref_xla_mb']:.0f}" if "ref_xla_mb" in v else "-",
        f"{v['max_rel_err']:.1e}" if "max_rel_err" in v else "-",
        len(v.get("rope_times", [])),
    ]
    return cells


HEADER = [
    "N",
    "L",
    "width",
    "P",
    "rope_lab ms",
    "jacrev ms",
    "jacrev / rope_lab",
    "compile s (rope_lab / jacrev)",
    "peak RSS rise MB (rope_lab / jacrev)",
    "jacrev XLA MB",
    "max rel err",
    "repeats",
]


def cases(quick: bool, outputs: list[str]) -> dict[str, list[Case]]:
    """The benchmark's cases by table; repeats shrink with the work (N L P)."""

    def reps(n: int, length: int, width: int) -> int:
        work = n * length * n_params(width)
        return 5 if work < 1e8 else 3 if work < 5e8 else 2 if work < 5e9 else 1

    grid = [(16, 64, 64), (16, 64, 128)] if quick else SIZES
    t = TRACKING
    out: dict[str, list[Case]] = {}
    if "u" in outputs:
        out["sequence"] = [Case("sequence", "u", *g, repeats=reps(*g)) for g in grid]
        out["position"] = [Case("position", "u", *POSITION, repeats=2)]
        step = [("tracker", t["chunk_size"], 3), ("tracker-padded", t["chunk_size"], 3)]
        if not quick:
            step += [("api", t["chunk_size"], 3), ("api", None, 2)]
        out["step"] = [
            Case("step", "u", t["n"], t["length"], t["width"], repeats=r, chunk_size=c, method=m)
            for m, c, r in step
        ]
    if "trace" in outputs:
        trace = [(16, 64, 64)] if quick else [(16, 64, 64), (16, 64, 128)]
        out["trace"] = [Case("sequence", "trace", *g, repeats=2) for g in trace]
    return out


NOTES = f"""\
Model: rope_lab Transformer, RoPE, depth {DEPTH}, head_dim 32, GELU MLP x4, LayerNorm, vocab \
{VOCAB}, float32; P = trainable parameters. Kernels K(X, X) of N random sequences of length L \
(both sides compute features once). rope_lab = the public `sequence_kernel` / \
`position_kernel` (chunk_size None). jacrev = `jax.vmap(jax.jacrev(F))` of one sequence's \
outputs w.r.t. the `ravel_pytree`-flattened parameters, then an einsum, one `jax.jit`; \
output "u": F = sum_i <u, logits_i> / sqrt(V) with a fixed Gaussian u (the tracking default); \
"trace": V outputs (V backward passes per sequence). Times: median of interleaved repeats \
(compiled) in a fresh subprocess per case, fewer repeats for large cases (column repeats; \
1 = a single timed call after the first); compile = first call - median. Peak RSS rise: \
resident-set high-water mark above the resident set before a timed call, the largest over \
the repeats (VmHWM reset via /proc/self/clear_refs, glibc mmap threshold 64 KiB), not XLA's \
estimate; "jacrev XLA MB" is \
`compiled.memory_analysis()` (argument + output + temp) of the reference. max rel err = \
max|K_rope_lab - K_jacrev| / max|K_jacrev|. A reference whose Jacobian would exceed \
{MEM_BUDGET_GB:g} GB, or whose first call (compile included) exceeds {SLOW_S:g} s, is not \
timed (shared machine)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset")
    parser.add_argument("--outputs", nargs="+", default=["u", "trace"], choices=["u", "trace"])
    parser.add_argument("--no-record", action="store_true", help="print, do not append")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(Case(**json.loads(args.worker)))
        return

    from benchmarks.common import markdown_table, record

    start = time.perf_counter()
    results: dict[str, list[Outcome]] = {}
    for name, group in cases(args.quick, args.outputs).items():
        print(f"{name}:", flush=True)
        results[name] = []
        for case in group:
            results[name].append(run_case(case))
            print(f"  {case.label}: {results[name][-1].seconds:.0f} s {summary(results[name][-1])}")
    total = time.perf_counter() - start
    emit = (
        (lambda title, table, notes: print(f"\n## {title}\n\n{table}\n\n{notes}"))
        if (args.no_record)
        else (lambda title, table, notes: record(title, table, notes=notes))
    )
    mode = " (quick)" if args.quick else ""
    if "sequence" in results:
        table = markdown_table(HEADER, [row(o) for o in results["sequence"]])
        emit(f"NTK sequence kernel, output u: rope_lab vs jacrev+einsum{mode}", table, NOTES)
    if "position" in results:
        rows = [row(o) for o in results["position"]]
        measured = _ms(results["position"][0].values.get("rope_times", []))
        n0, l0, w0 = POSITION
        for n, length, width in [] if args.quick else SIZES:
            if (n, length, width) == POSITION:
                continue
            work = n * length**2 * n_params(width) / (n0 * l0**2 * n_params(w0))
            gb = n * length * n_params(width) * 4 / 1e9
            est = f"~{measured * work / 1e3:.0f} s (est.)" if measured == measured else "?"
            rows.append([n, length, width, n_params(width), est, f"not run: J {gb:.1f} GB"])
            rows[-1] += ["-"] * (len(HEADER) - 7) + [0]
        notes = (
            "Position kernel K_ij(x, x') (N, N, L, L), output u per position: N L backward "
            "passes per side, N L^2 P work, and N L P-float Jacobians (both methods, unchunked). "
            f"Run at N, L, width = {POSITION} only; the other grid sizes are listed with "
            "rope_lab's time extrapolated from the measured one by N L^2 P (not measured) and "
            "the size J of one side's Jacobian."
        )
        emit(f"NTK position kernel, output u{mode}", markdown_table(HEADER, rows), notes)
    if "trace" in results:
        table = markdown_table(HEADER, [row(o) for o in results["trace"]])
        notes = '"trace" output: V = 32 outputs per sequence, so V backward passes each.'
        emit(f'NTK sequence kernel, output "trace"{mode}', table, notes)
    if "step" in results:
        t = TRACKING
        header = ["rope_lab method", "chunk_size", *HEADER[4:]]
        table = markdown_table(header, [row(o, with_case=False) for o in results["step"]])
        notes = (
            f"One NTK tracking step at the issue's size: N = {t['n']} probes, L_train = "
            f"{t['length']}, width {t['width']}, depth {DEPTH}, output u: K_train = "
            f"K(short, short) (N x N at L_train) + K_cross = K(long, short) with N long probes "
            f"at {t['multiplier']} x L_train. rope_lab 'tracker': what `NTKTracker` runs per "
            "step, one `gradient_features` pass per probe set (long probes with two masks, all "
            "and the unseen tail, so it also yields the tail kernel) and host contractions; "
            "'tracker-padded': the same with the short probes padded to the long length (one "
            "compiled program for both; `ntk.pad_to_longest`); 'api': two "
            f"`sequence_kernel` calls (chunk_size {t['chunk_size']}, NTKConfig's default, and "
            "unchunked), each computing both sides' gradient features once. jacrev: the "
            "same kernels (for the tracker rows the tail too: the long probes' Jacobian of the "
            "two outputs F and F_tail), each call its own jitted Jacobian + einsum (J_short "
            "computed in both). "
            "Peak / XLA memory: the larger of the two calls."
        )
        emit(f"NTK one tracking step (K_train + K_cross){mode}", table, notes)
    print(f"total {total:.0f} s")


if __name__ == "__main__":
    main()

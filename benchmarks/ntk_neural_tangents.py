"""neural-tangents' `empirical_ntk_fn` against the jacrev + einsum reference, in its own venv.

neural-tangents 0.6.5 (its last release) installs with jax 0.10.2 but does not import there
(`from jax.core import Jaxpr` fails), so it runs in a separate venv with jax 0.4.23 (see
`benchmarks/nt_env.sh`, which builds it and runs everything). rope_lab needs equinox 0.13.8 and
a newer jax, so this side uses a pure-JAX functional re-implementation of the same Transformer
(embedding, pre-LayerNorm blocks with RoPE causal attention and a GELU MLP, final norm, head)
with rope_lab's initial weights exported to .npz from the main venv:

    .venv/bin/python -m benchmarks.ntk_neural_tangents --export /tmp/rope_lab_nt   # main venv
    /tmp/ntenv/bin/python -m benchmarks.ntk_neural_tangents --weights /tmp/rope_lab_nt [--quick]

The export stores rope_lab's logits on check sequences; the functional model must reproduce
them (max relative difference printed and recorded) before anything is timed. Cases, outputs,
the reference (`vmap(jacrev)` of one sequence's outputs w.r.t. the flattened parameters, then
an einsum) and the measurements are those of `benchmarks/ntk.py`; each case runs in a fresh
worker. Every NtkImplementation (JACOBIAN_CONTRACTION, NTK_VECTOR_PRODUCTS,
STRUCTURED_DERIVATIVES, AUTO) is called with `vmap_axes=0` (sequences are independent), jitted,
and on K(X, X) with `x2=None`. Times are reported as ratios to the reference of the same run;
rope_lab's ratios to its own reference (main venv, jax 0.10.2) are in the tables of
`benchmarks/ntk.py`, so rope_lab vs neural-tangents is only ever compared through the shared
reference, each measured on its own jax version.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.ntk import (
    DEPTH,
    MEM_BUDGET_GB,
    SLOW_S,
    TRACKING,
    VOCAB,
    Case,
    Outcome,
    _emit,
    _measured,
    contract,
    jacobian_gb,
    n_params,
    run_case,
)

IMPLEMENTATIONS = (
    "JACOBIAN_CONTRACTION",
    "NTK_VECTOR_PRODUCTS",
    "STRUCTURED_DERIVATIVES",
    "AUTO",
)
WIDTHS = (64, 128, 256)
HEAD_DIM = 32
WEIGHTS = Path(os.environ.get("ROPE_LAB_NT_WEIGHTS", "/tmp/rope_lab_nt"))


# --------------------------------------------------------------------------- export (main venv)


def export(folder: Path) -> None:
    """rope_lab's initial weights (one .npz per width, per-layer names) and check logits."""
    import equinox as eqx
    import jax
    import numpy as np

    from rope_lab.config import ModelConfig, PositionConfig
    from rope_lab.model.transformer import Transformer, trainable

    folder.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        for train_length in sorted({64, 256, TRACKING["length"]}):
            cfg = ModelConfig(width=width, depth=DEPTH, position=PositionConfig(kind="rope"))
            model = Transformer(
                cfg,
                VOCAB,
                train_length=train_length,
                max_length=4096,
                key=jax.random.PRNGKey(0),
            )
            arrays: dict[str, np.ndarray] = {}
            params = eqx.filter(model, trainable(model))
            for path, leaf in jax.tree_util.tree_leaves_with_path(params):
                name = jax.tree_util.keystr(path).lstrip(".")
                if name.startswith("blocks."):
                    for layer in range(DEPTH):
                        arrays[name.replace("blocks.", f"blocks.{layer}.", 1)] = np.asarray(
                            leaf[layer]
                        )
                else:
                    arrays[name] = np.asarray(leaf)
            arrays["const.inv_freq"] = np.asarray(model.position.inv_freq.value)
            arrays["const.attention_factor"] = np.asarray(model.position.attention_factor.value)
            rng = np.random.default_rng(7)
            for length in (64, 256):
                tokens = rng.integers(0, VOCAB, (2, length)).astype(np.int32)
                arrays[f"check.tokens{length}"] = tokens
                arrays[f"check.logits{length}"] = np.asarray(jax.vmap(model)(tokens))
            path = folder / f"model_w{width}_l{train_length}.npz"
            np.savez(path, **arrays)
            print(f"wrote {path}")


# --------------------------------------------------------------------------- worker (nt venv)


def functional_model(weights: dict, width: int):
    """(params, consts, apply): apply(params, tokens (L,)) -> logits (L, V), pure JAX."""
    import jax
    import jax.numpy as jnp

    params = {
        k: jnp.asarray(v) for k, v in weights.items() if not k.startswith(("const.", "check."))
    }
    inv_freq = jnp.asarray(weights["const.inv_freq"])
    factor = jnp.asarray(weights["const.attention_factor"])
    heads, d_head = width // HEAD_DIM, HEAD_DIM
    rot = 2 * inv_freq.shape[0]

    def norm(x, w, b):
        h = x - x.mean(-1, keepdims=True)
        return h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-5) * w + b

    def rotary(x, positions):  # x (L, H, Dh): half-split pairs (j, j + rot / 2)
        angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
        angles = jnp.concatenate([angles, angles], axis=-1)[:, None, :]
        cos, sin = jnp.cos(angles) * factor, jnp.sin(angles) * factor
        head, rest = x[..., :rot], x[..., rot:]
        swapped = jnp.concatenate([-head[..., rot // 2 :], head[..., : rot // 2]], axis=-1)
        return jnp.concatenate([head * cos + swapped * sin, rest], axis=-1)

    def apply(p, tokens):
        length = tokens.shape[0]
        positions = jnp.arange(length)
        causal = jnp.tril(jnp.ones((length, length), bool))
        x = p["embedding"][tokens]
        for layer in range(DEPTH):
            w = lambda name, layer=layer: p[f"blocks.{layer}.{name}"]
            h = norm(x, w("attn_norm.weight"), w("attn_norm.bias"))
            split = lambda t: t.reshape(length, heads, d_head)
            q = rotary(split(h @ w("attn.q.weight").T), positions)
            k = rotary(split(h @ w("attn.k.weight").T), positions)
            v = split(h @ w("attn.v.weight").T)
            logits = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(d_head)
            weights_ = jax.nn.softmax(jnp.where(causal[None], logits, -jnp.inf), axis=-1)
            out = jnp.einsum("hqk,khd->qhd", weights_, v).reshape(length, width)
            x = x + out @ w("attn.o.weight").T
            h = norm(x, w("mlp_norm.weight"), w("mlp_norm.bias"))
            x = x + jax.nn.gelu(h @ w("mlp.up.weight").T) @ w("mlp.down.weight").T
        return norm(x, p["final_norm.weight"], p["final_norm.bias"]) @ p["head.weight"].T

    return params, apply


@dataclass(frozen=True)
class NTCase(Case):
    """A case and the neural-tangents implementations its worker runs (beside jacrev)."""

    group: tuple[str, ...] = ()


def _worker(case: NTCase) -> None:
    import jax
    import jax.numpy as jnp
    import neural_tangents as nt
    import numpy as np
    from jax.flatten_util import ravel_pytree

    jax.config.update("jax_default_matmul_precision", "highest")
    train_length = TRACKING["length"] if case.kernel == "step" else case.length
    weights = dict(np.load(WEIGHTS / f"model_w{case.width}_l{train_length}.npz"))
    params, apply = functional_model(weights, case.width)
    check = max(
        float(
            np.abs(
                np.asarray(jax.vmap(apply, (None, 0))(params, weights[f"check.tokens{n}"]))
                - weights[f"check.logits{n}"]
            ).max()
            / np.abs(weights[f"check.logits{n}"]).max()
        )
        for n in (64, 256)
    )
    flat, unravel = ravel_pytree(params)
    assert flat.size == n_params(case.width), (flat.size, n_params(case.width))
    _emit(params=int(flat.size), logits_rel_diff=check)
    if check > 1e-4:
        _emit(ref_status=f"functional model differs from rope_lab: {check:.1e}")
        return

    rng = np.random.default_rng(1)  # the same draws as benchmarks/ntk.py's worker
    u = jnp.asarray(rng.normal(size=VOCAB).astype(np.float32))
    tokens = jnp.asarray(rng.integers(0, VOCAB, (case.n, case.length)).astype(np.int32))
    long = rng.integers(0, VOCAB, (case.n, case.length * TRACKING["multiplier"]))
    long = jnp.asarray(long.astype(np.int32))
    scale = 1.0 / math.sqrt(VOCAB)

    def outputs(p, tok):  # one sequence: (1,), (V,) or (L,)
        logits = apply(p, tok)
        if case.kernel == "position":
            return logits @ u * scale
        if case.output == "trace":
            return jnp.sum(logits, axis=0) * scale
        return jnp.sum(logits @ u)[None] * scale

    batched = lambda p, x: jax.vmap(outputs, (None, 0))(p, x)  # (N, C) or (N, L)

    def reference(theta, tok1, tok2=None):
        jac = lambda tok: jax.vmap(jax.jacrev(lambda th, t: outputs(unravel(th), t)), (None, 0))(
            theta, tok
        )
        j1 = jac(tok1)
        j2 = j1 if tok2 is None else jac(tok2)
        return contract(j1, j2, case.kernel == "position")

    # neural-tangents traces (averages) over trace_axes: sequence kernels trace the output axis
    # (V for "trace", times V to undo the mean), position kernels keep it (N, N, L, L)
    trace_axes = () if case.kernel == "position" else (-1,)
    times_v = VOCAB if case.output == "trace" else 1
    sync = jax.block_until_ready
    candidates = {"jacrev": jax.jit(reference)}
    for name in case.group:
        fn = nt.empirical_ntk_fn(
            batched,
            trace_axes=trace_axes,
            vmap_axes=0,
            implementation=getattr(nt.NtkImplementation, name),
        )
        candidates[name] = jax.jit(lambda x1, x2, p, fn=fn: fn(x1, x2, p) * times_v)

    def arguments(name):
        """The calls of one candidate: [(jitted function, args)], two for the tracking step."""
        if name == "jacrev":
            if case.kernel == "step":
                return [(tokens,), (long, tokens)]
            return [(tokens,)]
        if case.kernel == "step":
            return [(tokens, None, params), (long, tokens, params)]
        return [(tokens, None, params)]

    gb = jacobian_gb(case)
    if gb > MEM_BUDGET_GB:
        _emit(ref_status=f"not run: Jacobian {gb:.1f} GB > {MEM_BUDGET_GB:g} GB budget")
        return
    expected, timed = None, {}
    for name, fn in candidates.items():  # the reference first: the others are checked against it
        start = time.perf_counter()
        try:  # any failure of one implementation is recorded, not raised
            calls, xla_gb = [], 0.0
            for args in arguments(name):
                args = (flat, *args) if name == "jacrev" else args
                compiled = fn.lower(*args).compile()
                m = compiled.memory_analysis()
                if m is not None:
                    total = m.argument_size_in_bytes + m.output_size_in_bytes
                    xla_gb = max(xla_gb, (total + m.temp_size_in_bytes) / 1e9)
                calls.append((compiled, args))
            if xla_gb > MEM_BUDGET_GB:
                _emit(**{f"{name}_status": f"not run: XLA estimate {xla_gb:.1f} GB"})
                continue
            run = lambda calls=calls: [c(*args) for c, args in calls]
            value = sync(run())
        except Exception as e:
            _emit(**{f"{name}_status": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"})
            continue
        first = time.perf_counter() - start
        value = [np.asarray(v, np.float64) for v in jax.tree_util.tree_leaves(value)]
        expected = value if expected is None else expected
        if [v.shape for v in value] != [v.shape for v in expected]:
            _emit(**{f"{name}_status": f"shape {[v.shape for v in value]}"})
            continue
        err = max(
            float(np.abs(a - b).max() / np.abs(b).max())
            for a, b in zip(value, expected, strict=True)
        )
        _emit(**{f"{name}_first": first, f"{name}_err": err, f"{name}_xla_gb": xla_gb})
        if first > SLOW_S + 120:  # compile included: generous
            _emit(**{f"{name}_status": f"too slow: first call {first:.0f} s"})
            continue
        timed[name] = _measured(run, sync)
    if "jacrev" not in timed:
        return
    from benchmarks.common import interleaved

    runs = interleaved(timed, repeats=case.repeats, warmup=0)
    for name, values in runs.items():
        _emit(
            **{
                f"{name}_times": [t for t, _ in values],
                f"{name}_peak_mb": max(m for _, m in values),
                f"{name}_status": "ok",
            }
        )


# --------------------------------------------------------------------------- parent


# STRUCTURED_DERIVATIVES needs far more memory than the others (1 GB at N 16, L 64, width 64):
# its own worker, so that running out of memory there loses nothing else
GROUPS = (("JACOBIAN_CONTRACTION", "NTK_VECTOR_PRODUCTS", "AUTO"), ("STRUCTURED_DERIVATIVES",))


def nt_cases(quick: bool) -> list[Case]:
    t = TRACKING
    if quick:
        return [Case("sequence", "u", 16, 64, 64, repeats=3)]
    return [
        Case("sequence", "u", 16, 64, 64, repeats=3),
        Case("sequence", "u", 16, 64, 128, repeats=3),
        Case("sequence", "u", 32, 256, 128, repeats=2),
        Case("sequence", "trace", 16, 64, 64, repeats=2),
        Case("position", "u", 16, 64, 64, repeats=2),
        Case("step", "u", t["n"], t["length"], t["width"], repeats=2),
    ]


def _ms(xs) -> float:
    import statistics

    return 1e3 * statistics.median(xs) if xs else math.nan


def table_rows(case: Case, outcomes: list[Outcome]) -> list[list[object]]:
    """jacrev (of the first worker), then each implementation against its own worker's jacrev."""
    what = f"{case.kernel} {case.output}" if case.kernel != "step" else "tracking step"
    rows = []
    for i, o in enumerate(outcomes):
        v = o.values
        ref = _ms(v.get("jacrev_times", []))
        names = o.case.group if i else ("jacrev", *o.case.group)
        for name in names:
            ms = _ms(v.get(f"{name}_times", []))
            status = v.get(f"{name}_status", v.get("ref_status", o.error or "not run"))
            if o.error and status == "not run":
                status = o.error
            ok = status == "ok"
            compile_s = v.get(f"{name}_first", math.nan) - ms / 1e3
            rows.append(
                [
                    what,
                    case.n,
                    case.length,
                    case.width,
                    name,
                    ms if ok else status,
                    ms / ref if ok and ref == ref else "-",
                    f"{compile_s:.1f}" if ok else "-",
                    f"{v.get(f'{name}_peak_mb', math.nan):.0f}" if ok else "-",
                    f"{v[f'{name}_err']:.1e}" if f"{name}_err" in v else "-",
                ]
            )
    return rows


HEADER = [
    "kernel",
    "N",
    "L",
    "width",
    "candidate",
    "ms",
    "/ jacrev",
    "compile s",
    "peak RSS rise MB",
    "max rel err vs jacrev",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="main venv: write weights here and exit")
    parser.add_argument("--weights", type=Path, default=WEIGHTS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.export:
        export(args.export)
        return
    os.environ["ROPE_LAB_NT_WEIGHTS"] = str(args.weights)
    if args.worker:
        spec = json.loads(args.worker)
        _worker(NTCase(**{**spec, "group": tuple(spec["group"])}))
        return
    from benchmarks.common import markdown_table, record

    start = time.perf_counter()
    results = []
    for case in nt_cases(args.quick):
        outcomes = []
        for group in GROUPS:
            ntcase = NTCase(**{**asdict(case), "group": group})
            outcomes.append(run_case(ntcase, module="benchmarks.ntk_neural_tangents"))
            status = {k: v for k, v in outcomes[-1].values.items() if k.endswith("_status")}
            print(f"  {case.label} {group}: {outcomes[-1].seconds:.0f} s {status}", flush=True)
            print(f"    {outcomes[-1].error}" if outcomes[-1].error else "", end="", flush=True)
        results.append((case, outcomes))
    total = time.perf_counter() - start
    rows = [r for case, outcomes in results for r in table_rows(case, outcomes)]
    diffs = [
        o.values["logits_rel_diff"]
        for _, outs in results
        for o in outs
        if o.values.get("logits_rel_diff") is not None
    ]
    notes = (
        "neural-tangents 0.6.5 needs an older jax (with jax 0.10.2 it installs but fails on "
        "import: `from jax.core import Jaxpr`), so this ran in a separate venv (jax 0.4.23, "
        "tensorflow 2.15.1, numpy 1.26; `benchmarks/nt_env.sh`) on a pure-JAX functional "
        "re-implementation of rope_lab's Transformer (RoPE, depth 2, vocab 32) with rope_lab's "
        "exported initial weights: its logits match rope_lab's to a max relative difference of "
        f"{max(diffs, default=math.nan):.1e}. '/ jacrev' = time over the jacrev + einsum "
        "reference of the same worker (the same reference as benchmarks/ntk.py, here on jax "
        "0.4.23). rope_lab is compared with neural-tangents only through this shared "
        "reference: (neural-tangents / jacrev here) / (rope_lab / jacrev in the benchmarks/ntk.py "
        "table of the same case), each ratio measured on its own jax version. All candidates "
        "jitted, K(X, X) with x2=None, vmap_axes=0; STRUCTURED_DERIVATIVES (by far the most "
        "memory) runs in a second worker per case, its ratio against that worker's jacrev. "
        "jax 0.4.23's memory_analysis() reports zeros on CPU, so no XLA estimate. Tracking "
        "step = K(short, short) + K(long, short) as in benchmarks/ntk.py (unchunked). "
        "Compile = first call - median; "
        f"peak RSS rise as in benchmarks/ntk.py. Total {total:.0f} s."
    )
    table = markdown_table(HEADER, rows)
    title = "NTK: neural-tangents empirical_ntk_fn vs jacrev+einsum" + (
        " (quick)" if args.quick else ""
    )
    if args.no_record:
        print(f"\n## {title}\n\n{table}\n\n{notes}")
    else:
        record(title, table, notes=notes, packages=("neural-tangents", "tensorflow"))


if __name__ == "__main__":
    main()

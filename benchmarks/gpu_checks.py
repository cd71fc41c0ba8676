"""The Python steps of `benchmarks/gpu.sh`: each subcommand checks one thing and writes
`OUT/parts/<name>.json` (status, checks, metrics, summary lines); `report` merges them into
`OUT/gpu_results.json`, prints the summary and exits 1 on any failed check.

    python -m benchmarks.gpu_checks env          --out OUT [--dry]   # JAX sees CUDA
    python -m benchmarks.gpu_checks sweep-spec   --out OUT [--dry]   # the smoke spec to run
    python -m benchmarks.gpu_checks sweep-check  --out OUT --spec S --run-dir D --wall-s T
    python -m benchmarks.gpu_checks attention    --out OUT [--dry]   # cuDNN vs blocked kernel
    python -m benchmarks.gpu_checks train-step   --out OUT [--dry]   # MFU vs HF Llama (torch)
    python -m benchmarks.gpu_checks pack         --out OUT [--dry]   # 8 packed trials vs 1
    python -m benchmarks.gpu_checks report       --out OUT --steps STEPS.tsv [--dry]

`--dry` (or `GPU_SH_DRY=1`): tiny sizes on whatever backend JAX has (the CPU dry run of the
plumbing): the cuDNN comparison is skipped ("skipped: no GPU"; the blocked kernel is compared
with XLA's fused path instead, to exercise the comparison), the Hugging Face comparison is
skipped when torch has no CUDA (its side still runs on the CPU, for the plumbing only), and
nothing skipped is reported as passed. A status is "passed" only when every check of the step
ran and held.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

# Nominal dense bf16 tensor-core peaks (NVIDIA datasheets, TFLOP/s), matched on device_kind.
NOMINAL_BF16_TFLOPS = (("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0))


def dry_default() -> bool:
    """Whether `GPU_SH_DRY` asks for the CPU dry run."""
    return os.environ.get("GPU_SH_DRY", "0") not in ("", "0")


class Part:
    """One step's record: checks (name, status, detail), metrics and summary lines, written to
    OUT/parts/<name>.json by `finish`, which exits 1 when a check failed."""

    def __init__(self, out: Path, name: str):
        self.out, self.name = out, name
        self.checks: list[dict[str, str]] = []
        self.metrics: dict[str, Any] = {}
        self.summary: list[str] = []
        self.start = time.perf_counter()

    def check(self, ok: bool, name: str, detail: str = "") -> bool:
        """Record a check that ran; prints it, loudly when it failed."""
        status = PASSED if ok else FAILED
        self.checks.append({"name": name, "status": status, "detail": detail})
        print(f"[{self.name}] {'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return ok

    def skip(self, name: str, why: str) -> None:
        """Record a check that did not run (never counted as passed)."""
        self.checks.append({"name": name, "status": SKIPPED, "detail": why})
        print(f"[{self.name}] skipped: {name}: {why}", flush=True)

    def line(self, text: str) -> None:
        """A summary line (printed now and by `report`)."""
        self.summary.append(text)
        print(f"[{self.name}] {text}", flush=True)

    @property
    def status(self) -> str:
        """failed if any check failed, else skipped if any was skipped or none ran, else passed."""
        statuses = {c["status"] for c in self.checks}
        if FAILED in statuses:
            return FAILED
        return SKIPPED if SKIPPED in statuses or not statuses else PASSED

    def write(self) -> Path:
        """Write the part's JSON; returns its path."""
        folder = self.out / "parts"
        folder.mkdir(parents=True, exist_ok=True)
        data = {
            "name": self.name,
            "status": self.status,
            "seconds": round(time.perf_counter() - self.start, 2),
            "checks": self.checks,
            "summary": self.summary,
            "metrics": self.metrics,
        }
        path = folder / f"{self.name}.json"
        path.write_text(json.dumps(data, indent=2, default=_plain) + "\n")
        return path

    def finish(self) -> None:
        """Write the JSON; exit 1 (loudly) when a check failed."""
        self.write()
        if self.status == FAILED:
            bad = [c["name"] for c in self.checks if c["status"] == FAILED]
            print(f"!!! [{self.name}] FAILED checks: {', '.join(bad)}", file=sys.stderr)
            raise SystemExit(1)


def run_part(out: Path, name: str, body: Callable[[Part], None]) -> None:
    """Run `body` on a new Part; an exception is a failed check (traceback kept), then finish."""
    part = Part(out, name)
    try:
        body(part)
    except Exception as err:  # recorded, then the step exits 1
        traceback.print_exc()
        part.check(False, "no exception", f"{type(err).__name__}: {err}")
    part.finish()


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return str(x)


def _versions() -> dict[str, str]:
    import importlib.metadata

    found = {}
    for name in ("jax", "jaxlib", "jax-cuda12-plugin", "equinox", "optax", "torch", "ray"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


# ------------------------------------------------------------------------------------ env


def cmd_env(out: Path, dry: bool) -> None:
    """JAX's backend and devices; on the GPU run, fails unless JAX runs on CUDA."""

    def body(part: Part) -> None:
        import jax

        try:
            devices = jax.devices()
        except Exception as err:  # JAX_PLATFORMS=cuda and no CUDA backend
            platforms = os.environ.get("JAX_PLATFORMS", "")
            part.check(False, "JAX sees CUDA", f"no backend (JAX_PLATFORMS={platforms!r}): {err!r}")
            return
        dev = devices[0]
        stats = dev.memory_stats() or {}
        part.metrics = {
            "backend": jax.default_backend(),
            "devices": [str(d) for d in devices],
            "device_kind": dev.device_kind,
            "platform_version": getattr(dev.client, "platform_version", ""),
            "memory_bytes_limit": stats.get("bytes_limit"),
            "versions": _versions(),
            "dry": dry,
        }
        part.line(f"JAX {jax.__version__} backend {jax.default_backend()}: {devices}")
        if dry:
            part.skip("JAX sees CUDA", f"dry run (backend {jax.default_backend()})")
            return
        part.check(
            jax.default_backend() == "gpu" and dev.platform == "gpu",
            "JAX sees CUDA",
            f"backend {jax.default_backend()}, device {dev.device_kind}",
        )
        x = jax.numpy.ones((1024, 1024), jax.numpy.bfloat16)
        value = float((x @ x)[0, 0])
        part.check(value == 1024.0, "bf16 matmul on the device", f"(1 @ 1)[0, 0] = {value}")

    run_part(out, "env", body)


# ---------------------------------------------------------------------------------- sweep


def cmd_sweep_spec(out: Path, dry: bool, source: Path) -> None:
    """Write the smoke spec to run: sweeps/smoke.yaml with its trials sharing the GPU.

    `resources.num_gpus: 0` (the file's value, for CPUs) would leave each of the 8 trials' JAX
    processes preallocating 75% of the one GPU; 1/8 of it each runs them side by side, each
    preallocating its share (`rope_lab.runtime.device_share`). The dry run keeps 2 trials (RoPE
    and NoPE at width 32), 20 steps, one scaling stage, 4 NTK probes, on CPUs."""
    import yaml

    spec = yaml.safe_load(source.read_text())
    if dry:
        spec["grid"] = {"model.position.kind": ["rope", "none"], "model.width": [32]}
        spec["base"]["train"].update(steps=20, log_every=10, warmup_steps=2)
        spec["base"]["ntk"]["probes"] = 4
        spec["scaling"] = {"methods": ["linear"], "factors": [2], "finetune_steps": 0}
        spec["resources"] = {"num_cpus": 1, "num_gpus": 0}
    else:
        spec["resources"] = {"num_cpus": 1, "num_gpus": 0.125}
    path = out / "smoke.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"# {source} as benchmarks/gpu.sh runs it ({'dry run' if dry else 'one GPU'})\n"
    path.write_text(head + yaml.safe_dump(spec, sort_keys=False))
    print(path)


def cmd_sweep_check(out: Path, spec_path: Path, run_root: Path, wall_s: float, rc: int) -> None:
    """Every trial of the spec finished with every stage done."""

    def body(part: Part) -> None:
        from rope_lab.results import is_finished, trial_dir
        from rope_lab.sweep.spec import load_spec
        from rope_lab.trial.pipeline import read_done, stage_dir
        from rope_lab.trial.stage_plan import trial_stages

        spec = load_spec(spec_path)
        run_dir = run_root / spec.name
        trials: dict[str, dict] = {}
        for t in spec.trials:
            names = [s.name for s in trial_stages(t)]
            stages = {n: (read_done(stage_dir(run_dir, t.trial_id, n)) or {}) for n in names}
            trials[t.trial_id] = {
                "finished": is_finished(trial_dir(run_dir, t.trial_id), names),
                "stages": {n: r.get("status", "missing") for n, r in stages.items()},
                "stage_wall_s": {n: round(r.get("wall_time_s", 0.0), 1) for n, r in stages.items()},
            }
        part.metrics = {
            "spec": str(spec_path),
            "run_dir": str(run_dir),
            "resources": {"num_cpus": spec.resources.num_cpus, "num_gpus": spec.resources.num_gpus},
            "sweep_exit_code": rc,
            "wall_s": wall_s,
            "trials": trials,
        }
        part.check(rc == 0, "rope-lab sweep run exit code", f"{rc}")
        bad = {
            tid: info
            for tid, info in trials.items()
            if not info["finished"] or set(info["stages"].values()) != {"done"}
        }
        n_stages = sum(len(i["stages"]) for i in trials.values())
        part.check(
            not bad,
            "every trial finished, every stage done",
            f"{len(trials) - len(bad)}/{len(trials)} trials, {n_stages} stages"
            + (f"; not: {json.dumps(bad)}" if bad else ""),
        )
        part.line(
            f"smoke sweep: {len(trials) - len(bad)}/{len(trials)} trials finished "
            f"({n_stages} stages) in {wall_s:.0f} s wall, resources "
            f"{spec.resources.num_cpus:g} CPU + {spec.resources.num_gpus:g} GPU per trial"
        )

    run_part(out, "sweep", body)


# ------------------------------------------------------------------------------ attention

ATTN_DTYPE = "bfloat16"


def _attention_fn(impl: str, window: int | None, scale: float) -> Callable:
    import jax
    import jax.numpy as jnp

    from rope_lab.model.attention import blocked_attention, fused_attention
    from rope_lab.model.attention_logits import SOFTMAX

    if impl == "blocked":

        def blocked(q, k, v):
            positions = jnp.arange(q.shape[-2])

            def one(q, k, v):
                return blocked_attention(
                    q, k, v, positions, None, variant=SOFTMAX, scale=scale, window=window
                )

            return jax.vmap(one)(q, k, v)

        return blocked

    def fused(q, k, v):
        return fused_attention(q, k, v, scale=scale, window=window, implementation=impl)

    return fused


def _visible_pairs(length: int, window: int | None) -> int:
    w = length if window is None else min(window, length)
    return sum(min(i + 1, w) for i in range(length))


def _inputs(length: int, batch: int, heads: int, head_dim: int):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(length), 4)
    shape = (batch, heads, length, head_dim)
    return [jax.random.normal(k, shape, jnp.float32).astype(ATTN_DTYPE) for k in keys]


def _save_bf16(path: Path, x) -> None:
    np.save(path, np.asarray(x).view(np.uint16))


def _load_f32(path: Path) -> np.ndarray:
    bits = np.load(path).astype(np.uint32) << 16
    return bits.view(np.float32)


def cmd_attention_worker(args: argparse.Namespace) -> None:
    """One implementation at one window over ascending lengths, in its own process: compile,
    time, peak device memory (`memory_stats`), XLA's estimate; outputs saved for the parent."""
    import jax

    window = None if args.window == "none" else int(args.window)
    scale = args.head_dim**-0.5
    attn = _attention_fn(args.impl, window, scale)
    fwd = jax.jit(attn)

    def fwd_bwd(q, k, v, ct):
        _, vjp = jax.vjp(attn, q, k, v)
        return vjp(ct)

    fwd_bwd = jax.jit(fwd_bwd)
    dev = jax.devices()[0]

    def stats() -> dict:
        return dev.memory_stats() or {}

    save = Path(args.save)
    save.mkdir(parents=True, exist_ok=True)
    rows = []
    prev_peak = stats().get("peak_bytes_in_use")
    for length in args.lengths:
        q, k, v, ct = _inputs(length, args.batch, args.heads, args.head_dim)
        jax.block_until_ready((q, k, v, ct))
        if length == min(args.lengths):
            for name, x in zip("qkvc", (q, k, v, ct), strict=True):
                _save_bf16(save / f"in_{length}_{name}.npy", x)
        # exact and order-free (a device reduction may sum in a different order per run)
        digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in (q, k, v, ct)))
        digest = digest.hexdigest()[:16]
        baseline = stats().get("bytes_in_use")
        pairs = _visible_pairs(length, window)
        flops = {"fwd": 4 * args.batch * args.heads * args.head_dim * pairs}
        flops["fwd_bwd"] = 3.5 * flops["fwd"]  # backward = 2.5 forward (no recompute counted)
        for mode, fn, operands in (("fwd", fwd, (q, k, v)), ("fwd_bwd", fwd_bwd, (q, k, v, ct))):
            start = time.perf_counter()
            compiled = fn.lower(*operands).compile()
            compile_s = time.perf_counter() - start
            analysis = compiled.memory_analysis()
            xla_bytes = None
            if analysis is not None:
                xla_bytes = sum(
                    getattr(analysis, f, 0) or 0
                    for f in (
                        "argument_size_in_bytes",
                        "output_size_in_bytes",
                        "temp_size_in_bytes",
                    )
                )
            result = compiled(*operands)
            jax.block_until_ready(result)
            peak = stats().get("peak_bytes_in_use")
            rise = None
            rose = prev_peak is None or (peak is not None and peak > prev_peak)
            if peak is not None and baseline is not None and rose:
                rise = peak - baseline  # what the call needed beyond its live operands
            prev_peak = peak
            outs = result if isinstance(result, tuple) else (result,)
            for i, x in enumerate(outs):
                _save_bf16(save / f"{args.impl}_{length}_{mode}_{i}.npy", x)
            del result, outs

            def timed(compiled=compiled, operands=operands) -> float:
                start = time.perf_counter()
                for _ in range(args.inner):
                    r = compiled(*operands)
                jax.block_until_ready(r)
                return (time.perf_counter() - start) / args.inner

            times = sorted(timed() for _ in range(args.repeats))
            ms = 1e3 * times[len(times) // 2]
            rows.append(
                {
                    "impl": args.impl,
                    "window": window,
                    "length": length,
                    "mode": mode,
                    "ms": ms,
                    "tflops": flops[mode] / (ms * 1e-3) / 1e12,
                    "compile_s": compile_s,
                    "peak_rise_mib": None if rise is None else rise / 2**20,
                    "peak_bytes_in_use_mib": None if peak is None else peak / 2**20,
                    "xla_estimate_mib": None if xla_bytes is None else xla_bytes / 2**20,
                    "input_checksum": digest,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        del q, k, v, ct
        gc.collect()
    (save / f"rows_{args.impl}.json").write_text(json.dumps(rows))


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    diff = a - b
    return {
        "rel_l2": float(np.linalg.norm(diff) / max(np.linalg.norm(b), 1e-30)),
        "max_rel": float(np.abs(diff).max() / max(np.abs(b).max(), 1e-30)),
    }


# bf16 operands and outputs: about 3 significant digits; fwd_bwd compares dq, dk, dv.
TOLERANCE = {"fwd": {"rel_l2": 1e-2, "max_rel": 3e-2}, "fwd_bwd": {"rel_l2": 2e-2, "max_rel": 5e-2}}


def _reference_fwd(folder: Path, length: int, window: int | None, scale: float) -> np.ndarray:
    """Float32 numpy attention of the saved smallest-length inputs (causal, optional window)."""
    q, k, v = (_load_f32(folder / f"in_{length}_{n}.npy") for n in "qkv")
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    i = np.arange(length)
    visible = i[None, :] <= i[:, None]
    if window is not None:
        visible &= (i[:, None] - i[None, :]) < window
    logits = np.where(visible, logits, -np.inf)
    logits -= logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, v)


def cmd_attention(out: Path, dry: bool, work: Path, timeout: float) -> None:
    """cuDNN (GPU) against the blocked kernel, causal, bf16, over lengths, with and without a
    sliding window: outputs and gradients equal within bf16 tolerance; time and peak memory."""

    def body(part: Part) -> None:
        # No JAX here: on a GPU, initialising it would preallocate the memory the workers need.
        gpu = not dry
        if dry:
            lengths, batch, heads, head_dim, window = [256, 1024], 1, 2, 16, 128
            inner, repeats = 1, 2
        else:
            lengths, batch, heads, head_dim, window = [1024, 2048, 4096, 8192], 2, 16, 64, 512
            inner, repeats = 10, 5
        other = "cudnn" if gpu else "xla"
        if not gpu:
            part.skip("cuDNN vs blocked", "no GPU (the blocked kernel is compared with xla)")
        scale = head_dim**-0.5
        part.metrics = {
            "shape": {"batch": batch, "heads": heads, "head_dim": head_dim, "dtype": ATTN_DTYPE},
            "lengths": lengths,
            "windows": [None, window],
            "candidates": [other, "blocked"],
            "tolerance": TOLERANCE,
            "rows": [],
            "comparisons": [],
        }
        for win in (None, window):
            folder = work / f"attention_w{win}"
            for impl in (other, "blocked"):
                cmd = [sys.executable, "-m", "benchmarks.gpu_checks", "attention-worker"]
                cmd += ["--impl", impl, "--window", str(win).lower(), "--save", str(folder)]
                cmd += ["--lengths", *map(str, lengths), "--batch", str(batch)]
                cmd += ["--heads", str(heads), "--head-dim", str(head_dim)]
                cmd += ["--inner", str(inner), "--repeats", str(repeats)]
                print(f"[attention] {impl}, window {win}: {lengths}", flush=True)
                done = subprocess.run(cmd, timeout=timeout)
                rc = done.returncode
                if not part.check(rc == 0, f"{impl} w{win} worker", f"exit {rc}"):
                    raise RuntimeError(f"attention worker {impl} window {win} failed")
                rows = json.loads((folder / f"rows_{impl}.json").read_text())
                part.metrics["rows"] += rows
            sums = {
                impl: {
                    r["length"]: r["input_checksum"]
                    for r in part.metrics["rows"]
                    if r["impl"] == impl and r["window"] == win
                }
                for impl in (other, "blocked")
            }
            part.check(
                sums[other] == sums["blocked"],
                f"same inputs w{win}",
                "input checksums equal in both workers",
            )
            label = f"{other} vs blocked"
            for length in lengths:
                for mode, n in (("fwd", 1), ("fwd_bwd", 3)):
                    worst = {"rel_l2": 0.0, "max_rel": 0.0}
                    for i in range(n):
                        a = _load_f32(folder / f"{other}_{length}_{mode}_{i}.npy")
                        b = _load_f32(folder / f"blocked_{length}_{mode}_{i}.npy")
                        c = _compare(a, b)
                        worst = {key: max(worst[key], c[key]) for key in worst}
                    tol = TOLERANCE[mode]
                    ok = all(worst[key] <= tol[key] for key in tol)
                    part.metrics["comparisons"].append(
                        {"pair": label, "window": win, "length": length, "mode": mode, **worst}
                    )
                    what = "out" if mode == "fwd" else "dq, dk, dv"
                    part.check(
                        ok,
                        f"{label} L{length} w{win} {mode}",
                        f"{what}: rel_l2 {worst['rel_l2']:.2e}, max_rel {worst['max_rel']:.2e} "
                        f"(tolerance {tol['rel_l2']:.0e}, {tol['max_rel']:.0e})",
                    )
            ref = _reference_fwd(folder, min(lengths), win, scale)
            for impl in (other, "blocked"):
                got = _load_f32(folder / f"{impl}_{min(lengths)}_fwd_0.npy")
                c = _compare(got, ref)
                part.metrics["comparisons"].append(
                    {"pair": f"{impl} vs float32 numpy", "window": win, "length": min(lengths)}
                    | {"mode": "fwd", **c}
                )
                part.check(
                    c["rel_l2"] <= TOLERANCE["fwd"]["rel_l2"],
                    f"{impl} vs float32 reference L{min(lengths)} w{win}",
                    f"rel_l2 {c['rel_l2']:.2e}, max_rel {c['max_rel']:.2e}",
                )
            for path in folder.glob("*.npy"):  # hundreds of MB at 8192 on a GPU
                path.unlink()

        def mib(x):
            return "n/a" if x is None else f"{x:.0f}"

        for r in part.metrics["rows"]:
            if r["impl"] == "blocked":
                continue
            b = next(
                x
                for x in part.metrics["rows"]
                if x["impl"] == "blocked"
                and (x["window"], x["length"], x["mode"]) == (r["window"], r["length"], r["mode"])
            )
            part.line(
                f"L {r['length']:>5} window {r['window']!s:>4} {r['mode']:<7}: "
                f"{r['impl']} {r['ms']:.3f} ms ({r['tflops']:.1f} TFLOP/s), peak rise "
                f"{mib(r['peak_rise_mib'])} MiB (XLA est. {mib(r['xla_estimate_mib'])}) | "
                f"blocked {b['ms']:.3f} ms ({b['tflops']:.1f} TFLOP/s), peak rise "
                f"{mib(b['peak_rise_mib'])} MiB (XLA est. {mib(b['xla_estimate_mib'])}) | "
                f"blocked / {r['impl']} time {b['ms'] / r['ms']:.2f}"
            )

    run_part(out, "attention", body)


# ----------------------------------------------------------------------------- train step


def _nominal_peak(kind: str) -> float | None:
    for name, tflops in NOMINAL_BF16_TFLOPS:
        if name in kind:
            return tflops * 1e12
    return None


def cmd_train_step(out: Path, dry: bool) -> None:
    """rope_lab's train step against HF LlamaForCausalLM (benchmarks/train_step.py's two sides)
    at width 1024, depth 8, L 1024, bf16 compute: tokens/s, MFU, ratio."""

    def body(part: Part) -> None:
        import jax
        import torch

        from benchmarks import train_step as ts
        from benchmarks.common import interleaved, median
        from rope_lab.model.attention import choose

        gpu = jax.default_backend() == "gpu" and not dry
        if dry:
            width, depth, length, batch, repeats, matmul_n = 64, 2, 64, 2, 2, 256
        else:
            width, depth, length, batch, repeats, matmul_n = 1024, 8, 1024, 8, 10, 8192
        vocab, dtype = 256, "bfloat16"
        shape = ts.Shape(vocab, width, depth, ts.HEAD_DIM, length, batch, dtype, "auto")
        torch_cuda = torch.cuda.is_available()
        attention = choose("auto", length, jax.numpy.bfloat16, has_bias=False)
        part.metrics = {
            "shape": {
                "vocab": vocab,
                "width": width,
                "depth": depth,
                "head_dim": ts.HEAD_DIM,
                "length": length,
                "batch": batch,
                "dtype": f"{dtype} compute, float32 parameters (both sides)",
            },
            "rope_lab_attention": attention,
            "torch_cuda": torch_cuda,
            "torch_threads": torch.get_num_threads(),
        }
        if gpu:
            part.check(attention == "cudnn", "rope_lab attention resolves to cudnn", attention)
        tokens, targets = ts.make_batch(shape)
        sides = {"rope_lab": ts.rope_lab_side(shape, tokens, targets)}
        sides["torch"] = ts.torch_side(shape, tokens, targets)
        counts = {n: (s.params, s.non_embedding_params) for n, s in sides.items()}
        part.check(counts["rope_lab"] == counts["torch"], "equal parameter counts", f"{counts}")
        first = {n: s.run() for n, s in sides.items()}
        runs = {n: s.run for n, s in sides.items()}
        runs.update(ts.matmul_timers(matmul_n, dtype))
        times = interleaved(runs, repeats=repeats, warmup=1)
        med = {n: median(t) for n, t in times.items()}
        per_token = ts.model_flops_per_token(shape, sides["rope_lab"].non_embedding_params)
        tps = {n: shape.tokens / med[n] for n in sides}
        peak = 2 * matmul_n**3 / med["jax matmul"]
        nominal = _nominal_peak(jax.devices()[0].device_kind) if gpu else None
        losses = {n: s.loss() for n, s in sides.items()}
        for n, loss in losses.items():
            part.check(
                math.isfinite(loss) and 0 < loss < math.log(vocab) + 1.5,
                f"{n} loss finite, not above ln(vocab) + 1.5",
                f"{loss:.3f}; ln(vocab) {math.log(vocab):.3f} (random tokens, fixed batch)",
            )
        result = {
            n: {
                "tokens_per_s": tps[n],
                "ms_per_step": 1e3 * med[n],
                "first_step_s": first[n],
                "mfu_vs_measured_matmul": per_token * tps[n] / peak,
                "mfu_vs_nominal": None if nominal is None else per_token * tps[n] / nominal,
                "loss": losses[n],
            }
            for n in sides
        }
        part.metrics |= {
            "flops_per_token": per_token,
            "measured_bf16_matmul_tflops_jax": peak / 1e12,
            "measured_bf16_matmul_tflops_torch": 2 * matmul_n**3 / med["torch matmul"] / 1e12,
            "matmul_n": matmul_n,
            "nominal_bf16_tflops": None if nominal is None else nominal / 1e12,
            "repeats": repeats,
        }
        ratio = tps["rope_lab"] / tps["torch"]

        def describe(n: str) -> str:
            r = result[n]
            nom = r["mfu_vs_nominal"]
            return (
                f"{n} {r['tokens_per_s']:.4g} tok/s, MFU {100 * r['mfu_vs_measured_matmul']:.1f}% "
                f"of the measured matmul"
                + ("" if nom is None else f", {100 * nom:.1f}% of nominal")
            )

        if gpu and torch_cuda:
            part.metrics["sides"] = result
            part.metrics["ratio_rope_lab_over_torch"] = ratio
            part.line(
                f"width {width} depth {depth} L {length} batch {batch} bf16: "
                f"{describe('rope_lab')}; {describe('torch')}; rope_lab / torch {ratio:.2f}"
            )
        else:
            part.metrics["rope_lab"] = result["rope_lab"]
            part.metrics["plumbing_only_cpu"] = {"torch": result["torch"], "ratio": ratio}
            part.line(
                f"width {width} depth {depth} L {length} {dtype}: {describe('rope_lab')}"
                + (" (dry run: CPU, not an MFU)" if dry else "")
            )
            why = "dry run" if dry else "JAX not on a GPU"
            why = "torch has no CUDA" if not torch_cuda else why
            part.skip("HF Llama comparison", f"{why} (its side ran on the CPU, plumbing only)")
            part.skip("train-step MFU on a GPU", why)

    run_part(out, "train_step", body)


# ----------------------------------------------------------------------------------- pack


def cmd_pack(out: Path, dry: bool, work: Path) -> None:
    """Eight trials equal but for their seeds as one packed program against one trial alone:
    the vmapped step's throughput (steady state) and the pipeline's train stages (wall,
    compilation included)."""

    def body(part: Part) -> None:
        import jax
        import polars as pl

        from benchmarks.common import interleaved, median
        from benchmarks.ensemble import Ensemble, Sequential, bench_trial, pipeline_trials
        from rope_lab.config import to_dict
        from rope_lab.model.factory import make_model
        from rope_lab.results import trial_dir
        from rope_lab.tasks import task_from_config
        from rope_lab.trial.optimizer import make_optimizer
        from rope_lab.trial.packing import plan_packs
        from rope_lab.trial.pipeline import run_pack_train, run_train_stage
        from rope_lab.trial.train import TraceGuard, make_train_step

        k = 8
        steps, repeats, pipeline_steps = (3, 2, 10) if dry else (20, 5, 200)
        cfg = bench_trial()
        tokens = cfg.train.batch_size * cfg.train.length
        part.metrics = {
            "k": k,
            "trial": "width 64, depth 2, head_dim 16, RoPE, passkey (vocab 32), L 64, batch 16",
            "backend": jax.default_backend(),
        }
        guard = TraceGuard("train_step")
        step = make_train_step(
            cfg,
            task_from_config(cfg.task),
            make_optimizer(cfg.train, make_model(cfg)),
            length=cfg.train.length,
            guard=guard,
        )
        one, ens = Sequential(cfg, step, [0]), Ensemble(cfg, list(range(k)))
        first = {"one": one.run(1), "packed": ens.run(1)}
        times = interleaved(
            {"one": lambda: one.run(steps), "packed": lambda: ens.run(steps)},
            repeats=repeats,
            warmup=1,
        )
        guard.check()
        rate = {
            "one": tokens * steps / median(times["one"]),
            "packed": k * tokens * steps / median(times["packed"]),
        }
        ratio = rate["packed"] / rate["one"]
        part.metrics["step"] = {
            "tokens_per_s": rate,
            "ratio_packed_over_one": ratio,
            "first_call_s": first,
            "steps_per_measurement": steps,
            "repeats": repeats,
        }
        part.check(math.isfinite(ratio) and ratio > 0, "packed step throughput measured", "")
        part.line(
            f"vmapped step: 8 packed {rate['packed']:.4g} tok/s vs 1 trial {rate['one']:.4g} "
            f"tok/s: ratio {ratio:.2f} (8 = perfect packing)"
        )

        trials = pipeline_trials(k, pipeline_steps)
        packs = plan_packs(trials)
        part.check(
            len(packs) == 1 and packs[0].packed and len(packs[0].trials) == k,
            "plan_packs: one pack of 8",
            f"{[(len(p.trials), p.reason) for p in packs]}",
        )
        walls, results = {}, {}
        for name in ("one", "packed"):
            run_dir = work / "pack" / name
            start = time.perf_counter()
            if name == "one":
                results[name] = [run_train_stage(to_dict(trials[0]), run_dir)]
            else:
                members = run_pack_train([to_dict(t) for t in trials], run_dir)["members"]
                results[name] = list(members.values())
            walls[name] = time.perf_counter() - start
            statuses = [r["status"] for r in results[name]]
            part.check(
                statuses == ["done"] * len(statuses), f"{name}: train stages done", f"{statuses}"
            )

        def first_loss(run_dir: Path, trial_id: str) -> float:
            rows = pl.read_parquet(str(trial_dir(run_dir, trial_id) / "train" / "*.parquet"))
            return float(rows.sort("step")["loss"][0])

        tid = trials[0].trial_id
        a, b = first_loss(work / "pack" / "one", tid), first_loss(work / "pack" / "packed", tid)
        part.check(
            abs(a - b) <= 1e-2 * abs(a),
            "seed 0 packed = alone (first logged loss)",
            f"{b:.5f} vs {a:.5f} (rel tolerance 1e-2)",
        )
        finals = [r["final_loss"] for r in results["packed"]]
        part.check(
            len({round(x, 6) for x in finals}) == k,
            "8 members differ (distinct seeds)",
            f"final losses {[round(x, 4) for x in finals]}",
        )
        e2e = {
            "one": pipeline_steps * tokens / walls["one"],
            "packed": k * pipeline_steps * tokens / walls["packed"],
        }
        part.metrics["pipeline"] = {
            "steps": pipeline_steps,
            "wall_s": walls,
            "tokens_per_s": e2e,
            "ratio_packed_over_one": e2e["packed"] / e2e["one"],
            "compile_s": {
                n: sum(p["compile_s"] for p in results[n][0]["phases"].values()) for n in results
            },
        }
        part.line(
            f"pipeline train stages ({pipeline_steps} steps, compile and IO included): 8 packed "
            f"{walls['packed']:.1f} s vs 1 trial {walls['one']:.1f} s: throughput ratio "
            f"{e2e['packed'] / e2e['one']:.2f}"
        )

    run_part(out, "pack", body)


# --------------------------------------------------------------------------------- report


def cmd_report(out: Path, dry: bool, steps_file: Path, elapsed: float, budget: float) -> int:
    """Merge the parts into OUT/gpu_results.json, print the summary; 1 if anything failed."""
    steps = []
    if steps_file.exists():
        for line in steps_file.read_text().splitlines():
            name, rc, seconds = line.split("\t")
            steps.append({"name": name, "exit_code": int(rc), "seconds": int(seconds)})
    parts = {}
    for path in sorted((out / "parts").glob("*.json")):
        data = json.loads(path.read_text())
        parts[data["name"]] = data
    failures = [f"step {s['name']} exited {s['exit_code']}" for s in steps if s["exit_code"]]
    for name, data in parts.items():
        failures += [f"{name}: {c['name']}" for c in data["checks"] if c["status"] == FAILED]
    expected = ("env", "sweep", "attention", "train_step", "pack")
    failures += [f"{name}: no result" for name in expected if name not in parts]
    over = not dry and elapsed > budget
    if over:
        failures.append(f"total {elapsed:.0f} s over the {budget:.0f} s budget")
    skipped = [
        f"{name}: {c['name']} ({c['detail']})"
        for name, data in parts.items()
        for c in data["checks"]
        if c["status"] == SKIPPED
    ]
    if not dry:  # on the GPU every check must run
        failures += [f"not run on the GPU: {text}" for text in skipped]
    status = FAILED if failures else (SKIPPED if skipped else PASSED)
    result = {
        "status": status,
        "dry_run": dry,
        "elapsed_s": elapsed,
        "budget_s": budget,
        "failures": failures,
        "skipped": skipped,
        "steps": steps,
        "parts": parts,
    }
    path = out / "gpu_results.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("\n========== benchmarks/gpu.sh summary" + (" (DRY RUN, no GPU numbers)" if dry else ""))
    for name in expected:
        data = parts.get(name)
        if data is None:
            print(f"- {name}: NO RESULT")
            continue
        n = {s: sum(c["status"] == s for c in data["checks"]) for s in (PASSED, FAILED, SKIPPED)}
        print(
            f"- {name}: {data['status'].upper()} ({n[PASSED]} passed, {n[FAILED]} failed, "
            f"{n[SKIPPED]} skipped; {data['seconds']:.0f} s)"
        )
        for text in data["summary"]:
            print(f"    {text}")
    print("steps: " + ", ".join(f"{s['name']} {s['seconds']}s" for s in steps))
    print(f"total {elapsed:.0f} s" + ("" if dry else f" (budget {budget:.0f} s)"))
    for text in skipped:
        print(f"SKIPPED (not passed): {text}")
    print(f"results: {path}")
    if failures:
        print("\n!!!!!!!!!! FAILED !!!!!!!!!!", file=sys.stderr)
        for text in failures:
            print(f"!!! {text}", file=sys.stderr)
        return 1
    print(f"overall: {status.upper()}")
    return 0


# ----------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    """Dispatch a subcommand (module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, required=True, help="results folder")
    common.add_argument("--work", type=Path, help="scratch folder (default OUT/work)")
    common.add_argument("--dry", action="store_true", default=dry_default(), help="CPU dry run")
    for name in ("env", "train-step", "pack"):
        sub.add_parser(name, parents=[common])
    p = sub.add_parser("sweep-spec", parents=[common])
    p.add_argument("--source", type=Path, default=Path("sweeps/smoke.yaml"))
    p = sub.add_parser("sweep-check", parents=[common])
    p.add_argument("--spec", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, required=True, help="the sweep's --out")
    p.add_argument("--wall-s", type=float, default=float("nan"))
    p.add_argument("--rc", type=int, default=0, help="exit code of rope-lab sweep run")
    p = sub.add_parser("attention", parents=[common])
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per worker")
    p = sub.add_parser("attention-worker")
    p.add_argument("--impl", choices=["cudnn", "xla", "blocked"], required=True)
    p.add_argument("--window", required=True)
    p.add_argument("--save", required=True)
    p.add_argument("--lengths", type=int, nargs="+", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--inner", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p = sub.add_parser("report", parents=[common])
    p.add_argument("--steps", type=Path, required=True)
    p.add_argument("--elapsed", type=float, required=True)
    p.add_argument("--budget", type=float, default=480.0)
    args = parser.parse_args(argv)
    if args.cmd == "attention-worker":
        cmd_attention_worker(args)
        return
    out: Path = args.out
    work: Path = args.work or out / "work"
    if args.cmd == "env":
        cmd_env(out, args.dry)
    elif args.cmd == "sweep-spec":
        cmd_sweep_spec(work, args.dry, args.source)
    elif args.cmd == "sweep-check":
        cmd_sweep_check(out, args.spec, args.run_dir, args.wall_s, args.rc)
    elif args.cmd == "attention":
        cmd_attention(out, args.dry, work, args.timeout)
    elif args.cmd == "train-step":
        cmd_train_step(out, args.dry)
    elif args.cmd == "pack":
        cmd_pack(out, args.dry, work)
    elif args.cmd == "report":
        raise SystemExit(cmd_report(out, args.dry, args.steps, args.elapsed, args.budget))


if __name__ == "__main__":
    main()

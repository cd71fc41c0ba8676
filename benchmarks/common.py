"""Shared benchmark plumbing: machine and version header, interleaved timing, matmul peak, and
appending a table to `benchmarks/RESULTS.md`.

Benchmarks are not tests: each script measures rope_lab against a reference in the same run and
reports the ratio, so a busy machine slows both sides alike.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine() -> str:
    """One line: CPU model, cores, load average, OS."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, load {load:.2f}, {system}"


def versions(packages: Sequence[str] = ("jax", "jaxlib", "equinox", "optax")) -> str:
    """'name version' pairs of the installed packages (missing ones are skipped)."""
    found = []
    for name in packages:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def time_call(fn: Callable[[], object], *, sync: Callable[[object], object] = lambda x: x) -> float:
    """Seconds for one call of fn, with `sync` applied to the result (e.g. block_until_ready)."""
    start = time.perf_counter()
    sync(fn())
    return time.perf_counter() - start


def interleaved(
    candidates: dict[str, Callable[[], float]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, list[float]]:
    """Run each candidate's timing function in turn, `repeats` rounds, after `warmup` rounds.

    Each callable returns the seconds of one measurement. Interleaving means slow phases of a
    shared machine hit every candidate alike. Returns the measurements per candidate.
    """
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            times[name].append(fn())
    return times


def median(xs: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return statistics.median(xs)


def matmul_peak_flops(n: int = 2048, repeats: int = 5) -> float:
    """Measured float32 FLOP/s of an n x n JAX matmul on the default device (median of repeats)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    sync = lambda r: r.block_until_ready()
    times = [time_call(lambda: f(a, b), sync=sync) for _ in range(repeats)]
    return 2 * n**3 / median(times)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats get 4 significant digits."""

    def cell(x: object) -> str:
        return f"{x:.4g}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def record(title: str, table: str, *, notes: str = "", packages: Sequence[str] = ()) -> None:
    """Print the table and append it to RESULTS.md under a dated heading with machine/versions."""
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    pkgs = versions(("jax", "jaxlib", "equinox", "optax", *packages))
    block = f"\n## {title} ({stamp})\n\nMachine: {machine()}. Versions: {pkgs}.\n\n{table}\n"
    if notes:
        block += f"\n{notes}\n"
    print(block)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Benchmark results\n\nAppended by the scripts in `benchmarks/`; newest last. "
            "Every ratio compares two candidates measured in the same run.\n"
        )
    with RESULTS.open("a") as f:
        f.write(block)

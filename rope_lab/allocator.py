"""glibc malloc settings under which XLA on CPU stops page-faulting its buffers on every call.

XLA's CPU runtime allocates a program's buffers at each execution. glibc serves blocks above
32 MiB (and, after trimming, many smaller ones) with fresh pages and hands them back to the kernel
on free, so every training step faults its whole working set in again: ~256k minor faults and
~0.5 s of kernel time per width-256 step of `benchmarks/train_step.py`. Backing large blocks with
transparent huge pages (`glibc.malloc.hugetlb=1`, effective where THP is `madvise` or `always`)
and not trimming the heap cuts the faults ~100x; `benchmarks/allocator.py` measures the speed-up.

glibc reads `GLIBC_TUNABLES` once, at process start, so the setting can only reach processes not
yet started: the `rope-lab` command re-executes itself once with it, and sweep workers get it
through Ray's `runtime_env`. `ROPE_LAB_MALLOC_TUNING=0` turns all of this off; keys the user
already set in `GLIBC_TUNABLES` win.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence

TUNABLES: dict[str, str] = {
    "glibc.malloc.hugetlb": "1",
    "glibc.malloc.trim_threshold": str(16 << 30),
    "glibc.malloc.top_pad": str(1 << 30),
}
OPT_OUT = "ROPE_LAB_MALLOC_TUNING"


def _parse(tunables: str) -> dict[str, str]:
    pairs = (item.partition("=") for item in tunables.split(":") if item)
    return {key: value for key, _, value in pairs}


def applies(env: Mapping[str, str] | None = None) -> bool:
    """Whether the tuning is wanted and meaningful here: Linux with glibc, not opted out."""
    env = os.environ if env is None else env
    if env.get(OPT_OUT, "1") == "0":
        return False
    return sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def tuned_tunables(current: str = "") -> str:
    """`GLIBC_TUNABLES` value: `current` (colon-separated key=value) plus any missing TUNABLES."""
    merged = {**TUNABLES, **_parse(current)}
    return ":".join(f"{key}={value}" for key, value in merged.items())


def is_tuned(env: Mapping[str, str] | None = None) -> bool:
    """True when every key of TUNABLES is already set in the environment's GLIBC_TUNABLES."""
    env = os.environ if env is None else env
    return TUNABLES.keys() <= _parse(env.get("GLIBC_TUNABLES", "")).keys()


def worker_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables to start a worker process with (empty where tuning does not apply)."""
    env = os.environ if env is None else env
    if not applies(env):
        return {}
    return {"GLIBC_TUNABLES": tuned_tunables(env.get("GLIBC_TUNABLES", ""))}


def reexec_tuned(argv: Sequence[str] | None = None) -> None:
    """Replace this process by itself started with the tuned allocator, unless already tuned.

    `argv` defaults to the interpreter's original command line (`sys.orig_argv`). Returns only
    when no re-execution is needed (or tuning does not apply).
    """
    if not applies() or is_tuned():
        return
    argv = list(sys.orig_argv if argv is None else argv)
    env = {**os.environ, **worker_env()}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)

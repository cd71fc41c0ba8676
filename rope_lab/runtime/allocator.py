"""glibc malloc settings under which XLA on CPU stops page-faulting its buffers on every call.

XLA's CPU runtime allocates a program's buffers at each execution, mostly from its worker
threads. glibc serves blocks above 32 MiB with fresh `mmap`ed pages, gives threads their own
arenas whose freed tops it hands back to the kernel, and trims the main heap, so every training
step faults its whole working set in again, at a cost in kernel time per step. One arena
(`arena_max=1`), no `mmap`ed blocks (`mmap_max=0`) and no trimming keep freed memory in the
process for the next step: the faults all but vanish and the step runs faster
(`benchmarks/allocator.py`, interleaved; the figures: benchmarks/RESULTS.md, "Allocator"). The
cost: the resident set does not shrink after its peak, which suits a process that runs trials.

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
    "glibc.malloc.arena_max": "1",
    "glibc.malloc.mmap_max": "0",
    "glibc.malloc.trim_threshold": str(16 << 30),
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

"""Compiled programs freed before a long-lived process runs out of memory maps.

Each program XLA compiles for the CPU holds about six memory mappings of its own (its code and
data), and JAX keeps every program it compiled while its function lives. A process that runs
stage after stage (the serial runner, a reused Ray worker) gathers them until `mmap` fails at
the kernel's `vm.max_map_count` (65,530 by default): LLVM then reports "Cannot allocate
memory" and the process dies of SIGSEGV. A 120-trial sweep on the serial runner did so after
234 stages. After each stage, `free_programs_if_crowded` drops JAX's compiled programs when the
process holds more than `SHARE` of the limit: the next stage compiles its own (or loads them
from the persistent compilation cache), and nothing is lost but that time. The test suite's
worker processes run the same check after every test (tests/conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

MAPS: Final = Path("/proc/self/maps")
LIMIT: Final = Path("/proc/sys/vm/max_map_count")
SHARE: Final = 0.5


def map_count(maps: Path = MAPS) -> int | None:
    """How many memory mappings this process holds (None where /proc does not tell)."""
    try:
        with maps.open("rb") as lines:
            return sum(1 for _ in lines)
    except OSError:
        return None


def map_limit(limit: Path = LIMIT) -> int | None:
    """The kernel's most mappings per process (None where /proc does not tell)."""
    try:
        return int(limit.read_text())
    except (OSError, ValueError):
        return None


def free_programs_if_crowded(limit: int | None = None, share: float = SHARE) -> bool:
    """Clear JAX's caches of compiled programs when this process holds more than `share` of
    `limit` mappings (default: the kernel's); whether it did. Never imports JAX: a process that
    has not has nothing to free."""
    jax = sys.modules.get("jax")
    limit = map_limit() if limit is None else limit
    held = map_count()
    if jax is None or limit is None or held is None or held <= share * limit:
        return False
    jax.clear_caches()
    return True

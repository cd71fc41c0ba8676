"""Where a stage's time goes: wall-clock and JAX compilation seconds per named phase.

Compilation time comes from `jax.monitoring` duration events (tracing, lowering to MLIR and the
XLA backend compile; a persistent-cache hit records its retrieval instead), summed over the
process, so a phase's compile share is the growth of that sum while the phase ran.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
    "/jax/compilation_cache/cache_retrieval_time_sec",
)
_COMPILE = {"seconds": 0.0, "listening": False}


def _listen(event: str, duration_secs: float, **_: str | int) -> None:
    if event in COMPILE_EVENTS:
        _COMPILE["seconds"] += duration_secs


def compile_seconds() -> float:
    """JAX compilation seconds spent in this process since the first call of this function."""
    if not _COMPILE["listening"]:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_listen)
        _COMPILE["listening"] = True
    return float(_COMPILE["seconds"])


@dataclass
class Phases:
    """Accumulates wall and compile seconds per phase; phases may nest (a nested phase's time
    is subtracted from its parent, so the phases partition the measured time)."""

    wall: dict[str, float] = field(default_factory=dict)
    compile: dict[str, float] = field(default_factory=dict)
    _stack: list[list[float]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block under `name`."""
        start, compiled = time.perf_counter(), compile_seconds()
        self._stack.append([0.0, 0.0])  # time taken by nested phases
        try:
            yield
        finally:
            nested_wall, nested_compile = self._stack.pop()
            wall = time.perf_counter() - start
            comp = compile_seconds() - compiled
            self.wall[name] = self.wall.get(name, 0.0) + wall - nested_wall
            self.compile[name] = self.compile.get(name, 0.0) + comp - nested_compile
            if self._stack:
                self._stack[-1][0] += wall
                self._stack[-1][1] += comp

    def as_dict(self) -> dict[str, dict[str, float]]:
        """{phase: {"wall_s": ..., "compile_s": ...}}, JSON-ready."""
        return {
            name: {"wall_s": round(wall, 4), "compile_s": round(self.compile.get(name, 0.0), 4)}
            for name, wall in self.wall.items()
        }


__all__ = ["COMPILE_EVENTS", "Phases", "compile_seconds"]

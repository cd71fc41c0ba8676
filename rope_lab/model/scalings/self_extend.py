"""``self_extend`` (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
Tuning"): pairs closer than the neighbour window W keep their exact relative position; farther
pairs use grouped positions, floor(p / G) for keys and floor(p / G) + W - floor(W / G) for
queries, so the grouped distances continue where the neighbour window ends. `factor` is the
group size G (an integer); llama.cpp's group attention is this method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rope_lab.model.scalings.remaps import PositionSets, Remap, as_float, window_or, xp
from rope_lab.model.scalings.rerope import NOT_IN_HF
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@dataclass(frozen=True)
class Grouped(PositionSets):
    """Exact positions within `window`; grouped by `group` beyond."""

    group: int
    window: int
    n_sets = 2
    exact_below_name = "window"

    @property
    def exact_below(self) -> int:
        """The neighbour window W: pairs closer than it are exact."""
        return self.window

    def query_positions(self, p: Any) -> list[Any]:
        """Exact; and floor(p / G) + W - floor(W / G)."""
        shift = self.window - self.window // self.group
        p = as_float(p)
        return [p, xp(p).floor(p / self.group) + shift]

    def key_positions(self, p: Any) -> list[Any]:
        """Exact; and floor(p / G)."""
        p = as_float(p)
        return [p, xp(p).floor(p / self.group)]

    def choice(self, q: Any, k: Any) -> Any:
        """Set 1 (grouped) where q - k >= W."""
        d = as_float(q)[:, None] - as_float(k)[None, :]
        return (d >= self.window).astype(xp(d).int32)


@SCALINGS.register("self_extend")
@dataclass(frozen=True)
class SelfExtend(Remap):
    """Group size `factor`, neighbour window `window` (default L_train / 4, in tokens)."""

    window: int | None = identity(None)
    uses_factor = True
    order = 22
    colors = ("#fee391", "#993404")
    not_in_hf = NOT_IN_HF

    def rule(self, factor: float, train_length: int) -> Grouped:
        """The group size must be a whole number; the window defaults to L_train / 4."""
        if float(factor) != int(factor):
            raise ValueError(f"factor (the group size) must be a whole number, got {factor!r}")
        w = window_or(self.window, train_length // 4, "window")
        return Grouped(int(factor), w)

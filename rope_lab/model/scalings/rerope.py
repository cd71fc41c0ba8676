"""``rerope`` and ``leaky_rerope`` (Su 2023, "Rectified Rotary Position Embeddings"): relative
positions kept exact inside a window w and clamped beyond it, so no pair is rotated past w.
ReRoPE rotates every pair at distance d >= w by w; Leaky ReRoPE by w + (d - w) / k, a slope
1 / k beyond the window (`factor` is k). Two position sets: exact positions, and queries at
w + (p - w) / k with keys at p / k (ReRoPE: queries at w, keys at 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rope_lab.model.scalings.remaps import PositionSets, Remap, as_float, window_or, xp
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity

NOT_IN_HF = "a relative-position remap, not a frequency scaling: no rope_type expresses it"


@dataclass(frozen=True)
class Clamped(PositionSets):
    """Pairs at distance d < window exact; beyond, w + slope (d - w)."""

    window: int
    slope: float
    n_sets = 2
    exact_below_name = "window"

    @property
    def exact_below(self) -> int:
        """The window: pairs closer than it are exact."""
        return self.window

    def query_positions(self, p: Any) -> list[Any]:
        """Exact; and w + slope (p - w) (ReRoPE, slope 0: w)."""
        p = as_float(p)
        return [p, p * self.slope + self.window * (1.0 - self.slope)]

    def key_positions(self, p: Any) -> list[Any]:
        """Exact; and slope p (ReRoPE: 0)."""
        p = as_float(p)
        return [p, p * self.slope]

    def choice(self, q: Any, k: Any) -> Any:
        """Set 1 where q - k >= window."""
        d = as_float(q)[:, None] - as_float(k)[None, :]
        return (d >= self.window).astype(xp(d).int32)


def default_window(train_length: int) -> int:
    """Half the training length (Su's experiments clamp at a fraction of it)."""
    return train_length // 2


@SCALINGS.register("rerope")
@dataclass(frozen=True)
class ReRoPE(Remap):
    """Relative positions clamped at `window` (default L_train / 2, in tokens)."""

    window: int | None = identity(None)
    order = 20
    colors = ("#bdbdbd", "#252525")
    not_in_hf = NOT_IN_HF

    def rule(self, factor: float, train_length: int) -> Clamped:
        """Clamped at the window, slope 0."""
        w = window_or(self.window, default_window(train_length), "window")
        return Clamped(w, 0.0)


@SCALINGS.register("leaky_rerope")
@dataclass(frozen=True)
class LeakyReRoPE(Remap):
    """Exact inside `window` (default L_train / 2), slope 1 / factor beyond."""

    window: int | None = identity(None)
    uses_factor = True
    order = 21
    colors = ("#fdae6b", "#7f2704")
    not_in_hf = NOT_IN_HF

    def rule(self, factor: float, train_length: int) -> Clamped:
        """Clamped at the window, slope 1 / factor."""
        w = window_or(self.window, default_window(train_length), "window")
        return Clamped(w, 1.0 / float(factor))

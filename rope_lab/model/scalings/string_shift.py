"""``string`` (An et al. 2025, "Why Does the Effective Context Length of LLMs Fall Short?",
STRING): relative positions of S or more are shifted down onto well-trained smaller ones,
d -> d - S + W, while pairs closer than S keep theirs. Two position sets: exact positions, and
queries at p - S + W with keys at p. Defaults are the authors': S = L_train / 3 and a small
local value W (128 at their lengths; here min(128, L_train / 16)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rope_lab.model.scalings.remaps import PositionSets, Remap, as_float, window_or, xp
from rope_lab.model.scalings.rerope import NOT_IN_HF
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@dataclass(frozen=True)
class Shifted(PositionSets):
    """Exact below `shift`; shifted by shift - local_window from there on."""

    shift: int
    local_window: int
    n_sets = 2
    exact_below_name = "shift"

    @property
    def exact_below(self) -> int:
        """The shift S: pairs closer than it are exact."""
        return self.shift

    def query_positions(self, p: Any) -> list[Any]:
        """Exact; and p - S + W."""
        p = as_float(p)
        return [p, p - (self.shift - self.local_window)]

    def key_positions(self, p: Any) -> list[Any]:
        """Exact in both sets."""
        p = as_float(p)
        return [p, p]

    def choice(self, q: Any, k: Any) -> Any:
        """Set 1 where q - k >= S."""
        d = as_float(q)[:, None] - as_float(k)[None, :]
        return (d >= self.shift).astype(xp(d).int32)


@SCALINGS.register("string")
@dataclass(frozen=True)
class String(Remap):
    """Shift S and local window W in tokens (defaults L_train / 3 and min(128, L_train / 16))."""

    shift: int | None = identity(None)
    local_window: int | None = identity(None)
    order = 24
    colors = ("#e6f598", "#66a61e")
    not_in_hf = NOT_IN_HF

    def rule(self, factor: float, train_length: int) -> Shifted:
        """Resolved S and W, with W < S."""
        shift = window_or(self.shift, train_length // 3, "shift", low=2)
        local = window_or(self.local_window, min(128, train_length // 16), "local_window")
        if local >= shift:
            raise ValueError(f"local_window must be smaller than shift ({shift}), got {local!r}")
        return Shifted(shift, local)

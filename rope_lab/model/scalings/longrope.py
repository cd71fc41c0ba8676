"""``longrope``: LongRoPE / Phi-3 per-frequency rescale factors, `short_factor` up to the
training length and `long_factor` beyond it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rope_lab.model.scalings.base import Scaling, _base_inv_freq, _output, _require_optional_real
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


def _as_floats(value: Any) -> Any:
    """A 1-D numeric sequence as a tuple of floats; anything else unchanged (for `check`)."""
    if isinstance(value, str | bytes):
        return value
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return value
    return tuple(float(v) for v in arr) if arr.ndim == 1 else value


def _check_factors(name: str, value: Any, half: int) -> None:
    """A per-frequency factor list: (rotary_dim // 2,) finite positive numbers."""
    try:
        if isinstance(value, str | bytes):
            raise TypeError
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a sequence of {half} positive numbers, got {value!r}"
        ) from None
    if arr.ndim != 1 or arr.shape[0] != half:
        raise ValueError(
            f"{name} must have length {half} (rotary_dim // 2), got shape {arr.shape}: {value!r}"
        )
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{name} must hold finite positive numbers, got {value!r}")


@SCALINGS.register("longrope")
@dataclass(frozen=True)
class LongRope(Scaling):
    """LongRoPE; `short_factor` and `long_factor` (d/2 positive numbers each) are required."""

    short_factor: tuple[float, ...] = identity()
    long_factor: tuple[float, ...] = identity()
    attention_factor: float | None = identity(None)

    needs_original_length = True
    length_dependent = True
    order = 8
    colors = ("#d9d98c", "#6b6b00")

    def __post_init__(self) -> None:
        object.__setattr__(self, "short_factor", _as_floats(self.short_factor))
        object.__setattr__(self, "long_factor", _as_floats(self.long_factor))

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, factor lists of length d/2, and log(original_length) > 0 if needed."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        _require_optional_real("attention_factor", self.attention_factor, low=0.0, inclusive=False)
        _check_factors("short_factor", self.short_factor, rotary_dim // 2)
        _check_factors("long_factor", self.long_factor, rotary_dim // 2)
        if self.attention_factor is None and factor > 1 and original_length == 1:
            raise ValueError(
                "original_length must be >= 2 for kind 'longrope' with factor > 1 "
                f"(log original_length divides), got {original_length!r}"
            )

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 default / (long or short factor by seq_len), and the attention factor."""
        assert original_length is not None
        use_long = seq_len is not None and seq_len > original_length
        ext = np.asarray(self.long_factor if use_long else self.short_factor, dtype=np.float64)
        inv = _base_inv_freq(theta, rotary_dim) / ext
        if self.attention_factor is not None:
            attention = float(self.attention_factor)
        elif factor > 1:
            attention = math.sqrt(1 + math.log(factor) / math.log(original_length))
        else:
            attention = 1.0
        return _output(inv, attention)

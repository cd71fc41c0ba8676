"""``yarn``: YaRN (Peng et al. 2023), a ramp between extrapolated and interpolated frequencies
plus an attention factor. The ramp runs in float32 like HF: its rounding is amplified by
(factor - 1) in the blend."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rope_lab.model.scalings.base import (
    Scaling,
    _base_inv_freq,
    _exponents,
    _output,
    _require_optional_real,
    _yarn_mscale,
)
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity

BETA_FAST = 32.0
BETA_SLOW = 1.0


def yarn_correction_range(
    rotary_dim: int,
    theta: float,
    original_length: int,
    beta_fast: float = BETA_FAST,
    beta_slow: float = BETA_SLOW,
    truncate: bool = True,
) -> tuple[float, float]:
    """(low, high) dims of the YaRN ramp: where a frequency turns beta_fast / beta_slow times.

    Unclamped bound: d * ln(L / (2 pi beta)) / (2 ln theta); with `truncate`, low is floored and
    high ceiled. Then low = max(low, 0) and high = min(high, d - 1) (HF clamps to the full rotary
    dim, not d/2 - 1, and clamps each bound on one side only).
    """

    def dim_for(rotations: float) -> float:
        return (
            rotary_dim
            * math.log(original_length / (rotations * 2 * math.pi))
            / (2 * math.log(theta))
        )

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


@SCALINGS.register("yarn")
@dataclass(frozen=True)
class Yarn(Scaling):
    """YaRN; None fields take HF's defaults (betas 32 and 1, truncate True, mscale-derived
    attention factor). mscale and mscale_all_dim count only when both are non-zero."""

    beta_fast: float | None = identity(None)
    beta_slow: float | None = identity(None)
    mscale: float | None = identity(None)
    mscale_all_dim: float | None = identity(None)
    attention_factor: float | None = identity(None)
    truncate: bool | None = identity(None)

    needs_original_length = True
    order = 4
    colors = ("#f7a8cf", "#ae017e")

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, theta > 1, and the optional parameters' ranges."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        check_ramp(self.name, theta, self.beta_fast, self.beta_slow, self.truncate)
        _require_optional_real("mscale", self.mscale, low=0.0, inclusive=True)
        _require_optional_real("mscale_all_dim", self.mscale_all_dim, low=0.0, inclusive=True)
        _require_optional_real("attention_factor", self.attention_factor, low=0.0, inclusive=False)

    def attention(self, factor: float) -> float:
        """The attention factor for `factor`: explicit, mscale ratio, or YaRN's default."""
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.mscale and self.mscale_all_dim:  # HF tests truthiness: 0 counts as unset
            return _yarn_mscale(factor, self.mscale) / _yarn_mscale(factor, self.mscale_all_dim)
        return _yarn_mscale(factor)

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 ramp-blended frequencies, and the attention factor."""
        assert original_length is not None
        inv = ramp_blend(
            rotary_dim,
            theta,
            factor,
            original_length,
            self.beta_fast,
            self.beta_slow,
            self.truncate,
        )
        return _output(inv, self.attention(float(factor)))


def check_ramp(kind: str, theta: float, beta_fast: Any, beta_slow: Any, truncate: Any) -> None:
    """The checks of YaRN's ramp (kind `kind`): theta > 1, optional betas > 0, truncate a bool."""
    if theta <= 1:
        raise ValueError(f"theta must be > 1 for kind {kind!r} (log theta divides), got {theta!r}")
    _require_optional_real("beta_fast", beta_fast, low=0.0, inclusive=False)
    _require_optional_real("beta_slow", beta_slow, low=0.0, inclusive=False)
    if truncate is not None and not isinstance(truncate, bool | np.bool_):
        raise ValueError(f"truncate must be a bool, got {truncate!r}")


def ramp_blend(
    rotary_dim: int,
    theta: float,
    factor: float,
    original_length: int,
    beta_fast: float | None = None,
    beta_slow: float | None = None,
    truncate: bool | None = None,
) -> np.ndarray:
    """(d/2,) float64 YaRN frequencies, its NTK-by-parts part: theta ** (-2i/d) kept up to the
    ramp's low dim, divided by `factor` from its high dim (`yarn_correction_range`), blended
    linearly over the dim index between them (the ramp in float32, as HF). None parameters
    take HF's defaults (betas 32 and 1, truncate True)."""
    theta, factor = float(theta), float(factor)
    low, high = yarn_correction_range(
        rotary_dim,
        theta,
        original_length,
        beta_fast or BETA_FAST,
        beta_slow or BETA_SLOW,
        True if truncate is None else bool(truncate),
    )
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    idx = np.arange(rotary_dim // 2, dtype=np.float32)
    ramp = np.clip((idx - np.float32(low)) / np.float32(high - low), 0, 1).astype(np.float32)
    extrapolation_weight = np.float32(1) - ramp
    interpolation_weight = (np.float32(1) - extrapolation_weight).astype(np.float64)
    extrapolation_weight = extrapolation_weight.astype(np.float64)

    extrapolated = _base_inv_freq(theta, rotary_dim)
    interpolated = 1.0 / (factor * np.power(theta, _exponents(rotary_dim)))
    return interpolated * interpolation_weight + extrapolated * extrapolation_weight

"""``llama3``: Llama 3.1 wavelength bands: short wavelengths kept, long ones divided by `factor`,
the band between smoothed. Computed in float32 in HF's operation order, since the smoothing
amplifies rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _exponents, _output, _require_real
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@SCALINGS.register("llama3")
@dataclass(frozen=True)
class Llama3(Scaling):
    """Llama 3.1 scaling; both band factors are required (0 < low_freq_factor < high)."""

    low_freq_factor: float = identity()
    high_freq_factor: float = identity()

    needs_original_length = True
    order = 7
    colors = ("#99e0e8", "#0e8b99")

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, then 0 < low_freq_factor < high_freq_factor."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        low, high = self.low_freq_factor, self.high_freq_factor
        _require_real("low_freq_factor", low, low=0.0, inclusive=False, what="a finite number > 0")
        _require_real(
            "high_freq_factor", high, low=low, inclusive=False, what=f"a finite number > {low!r}"
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
        """(d/2,) float32 band-scaled frequencies, and 1.0."""
        assert original_length is not None
        low_ff, high_ff = float(self.low_freq_factor), float(self.high_freq_factor)
        f32 = np.float32
        inv = (f32(1) / np.power(f32(theta), _exponents(rotary_dim).astype(f32))).astype(f32)
        # wavelength 2 pi / inv, and L / wavelength, each as reciprocal-then-multiply (HF's rdiv).
        wavelen = (f32(1) / inv) * f32(2 * math.pi)
        long_band = wavelen > f32(original_length / low_ff)  # divided by factor
        short_band = wavelen < f32(original_length / high_ff)  # kept
        scaled = np.where(long_band, inv / f32(factor), inv)
        smooth = ((f32(1) / wavelen) * f32(original_length) - f32(low_ff)) / f32(high_ff - low_ff)
        smoothed = (f32(1) - smooth) * scaled / f32(factor) + smooth * scaled
        return _output(np.where(~long_band & ~short_band, smoothed, scaled))

"""Independent float64 transcriptions of YaRN's parts, for the tests of `ntk_by_parts` and
`dynamic_yarn` (written from the definitions, not from rope_lab's code)."""

from __future__ import annotations

import math


def ramp_bounds(
    d: int, theta: float, length: int, beta_fast: float, beta_slow: float, truncate: bool
) -> tuple[float, float]:
    """The pair indices where the wavelength 2 pi theta ** (2i / d) fits beta_fast and beta_slow
    times into `length`: i = (d / 2) ln(length / (2 pi beta)) / ln theta; floored / ceiled when
    `truncate`; the low one clamped at 0 from below, the high one at d - 1 from above."""

    def index(beta: float) -> float:
        return (d / 2) * math.log(length / (2 * math.pi * beta)) / math.log(theta)

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0.0), min(high, d - 1.0)


def ntk_by_parts(
    d: int,
    theta: float,
    scale: float,
    length: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> list[float]:
    """Per pair i: gamma_i = clip((i - low) / (high - low), 0, 1) (a width of 0 read as 0.001),
    frequency (1 - gamma_i) theta_i + gamma_i theta_i / scale with theta_i = theta ** (-2i/d)."""
    low, high = ramp_bounds(d, theta, length, beta_fast, beta_slow, truncate)
    width = high - low if high != low else 0.001
    out = []
    for i in range(d // 2):
        base = theta ** (-2.0 * i / d)
        gamma = min(max((i - low) / width, 0.0), 1.0)
        out.append((1 - gamma) * base + gamma * base / scale)
    return out


def yarn_attention(scale: float) -> float:
    """YaRN's sqrt(1 / t) = 0.1 ln s + 1 (1 for s <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * math.log(scale) + 1.0

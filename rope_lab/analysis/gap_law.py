"""The extrapolation gap's power law in N and a joint loss law over length ratios.

The gap of a trial at length ratio r = L_eval / L_train is ``G = loss(r) - loss(1x)`` (the same
trial, so the same N and D). ``fit_gap_law`` fits ``G = g N^gamma`` by least squares of log G
on log N over every trial; a gap <= 0 has no logarithm, and rather than drop it (which would
bias gamma towards a shrinking gap being read as a closing one) the fit is refused with the
count of such gaps. gamma < 0 with its whole interval below 0 means scale closes the gap.
Intervals: percentile bootstrap resampling whole seeds (all trials of a seed together).

``fit_joint_law`` fits one law over all ratios,

    L(N, D, r) = E0 + E1 log2 r + A / N^(alpha0 + alpha1 log2 r)  (+ B / D^beta),

E and alpha linear in log2 r, A, B and beta shared: 5 parameters (7 with D) where separate
per-ratio laws take 3 (5) per ratio. It minimises the squared relative residuals
``predicted / loss - 1`` (scipy's trust-region least squares) from the separate laws' values
regressed on log2 r. `rope_lab.analysis.ratio_laws` compares the two on held-out scale.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize

from rope_lab.analysis.fits import percentile_ci, resampling_units
from rope_lab.analysis.loss_law import MIN_DISTINCT, LossLawFit

__all__ = ["GapFit", "JointLaw", "fit_gap_law", "fit_joint_law"]

_Array = np.ndarray[Any, np.dtype[np.float64]]
JOINT_NAMES = ("E0", "E1", "A", "alpha0", "alpha1", "B", "beta")


@dataclasses.dataclass(frozen=True)
class GapFit:
    """``G = g N^gamma`` with percentile-bootstrap intervals at ``level`` (NaN with fewer
    than 3 seeds); ``n`` gaps from ``n_groups`` seeds."""

    g: float
    gamma: float
    g_ci: tuple[float, float]
    gamma_ci: tuple[float, float]
    n: int
    n_groups: int
    level: float

    def predict(self, n: npt.ArrayLike) -> _Array:
        """The fitted gap at parameter counts ``n`` (any shape)."""
        return np.asarray(self.g * np.power(np.asarray(n, dtype=float), self.gamma))


def _log_line(lx: _Array, ly: _Array) -> tuple[float, float]:
    """Intercept and slope of ly ~ lx by least squares."""
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(intercept), float(slope)


def fit_gap_law(
    n: npt.ArrayLike,
    gap: npt.ArrayLike,
    *,
    groups: npt.ArrayLike | None = None,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> GapFit:
    """Fit ``gap = g n^gamma`` to (m,) parameter counts and gaps by least squares in log-log.

    ``groups`` (m,): bootstrap units (seeds); without them each point is one. ValueError when a
    gap is <= 0 (with how many, and at which N), a value is not finite, or fewer than 3
    distinct N remain."""
    na = np.asarray(n, dtype=float)
    ga = np.asarray(gap, dtype=float)
    if na.shape != ga.shape or na.ndim != 1:
        raise ValueError(f"n and gap must be 1-D of one length, got {na.shape} and {ga.shape}")
    if not (np.all(np.isfinite(na)) and np.all(np.isfinite(ga))):
        raise ValueError(f"gap fit: {int(np.sum(~np.isfinite(ga)))} gaps are not finite")
    bad = ga <= 0
    if bad.any():
        where = sorted({float(v) for v in na[bad]})
        raise ValueError(
            f"gap fit refused: {int(bad.sum())} of {ga.size} gaps are <= 0 (at N = "
            f"{', '.join(f'{v:g}' for v in where)}); a power law g N^gamma needs every gap > 0"
        )
    distinct = np.unique(na).size
    if distinct < MIN_DISTINCT:
        raise ValueError(
            f"gap fit needs at least {MIN_DISTINCT} distinct N, got {distinct} ({ga.size} gaps)"
        )
    ln, lg = np.log(na), np.log(ga)
    intercept, slope = _log_line(ln, lg)
    units = resampling_units(None if groups is None else np.asarray(groups, dtype=object), na.size)
    draws: list[tuple[float, float]] = []
    if len(units) >= 3:
        rng = np.random.default_rng(seed)
        for _ in range(n_boot):
            pick = np.concatenate([units[j] for j in rng.integers(0, len(units), len(units))])
            if np.unique(ln[pick]).size < 2:
                continue
            draws.append(_log_line(ln[pick], lg[pick]))
    nan = (math.nan, math.nan)
    boot = np.asarray(draws, dtype=float).reshape(-1, 2)
    enough = len(boot) >= 2
    return GapFit(
        g=math.exp(intercept),
        gamma=slope,
        g_ci=tuple(np.exp(percentile_ci(boot[:, 0], level))) if enough else nan,  # type: ignore[arg-type]
        gamma_ci=percentile_ci(boot[:, 1], level) if enough else nan,
        n=int(na.size),
        n_groups=len(units),
        level=level,
    )


@dataclasses.dataclass(frozen=True)
class JointLaw:
    """``L(N, D, r) = E0 + E1 log2 r + A / N^(alpha0 + alpha1 log2 r) + B / D^beta``
    (B = 0, beta NaN without D). ``rms_rel`` is the root-mean-square relative residual."""

    E0: float
    E1: float
    A: float
    alpha0: float
    alpha1: float
    B: float
    beta: float
    rms_rel: float
    n: int

    def predict(self, n: npt.ArrayLike, d: npt.ArrayLike | None, r: npt.ArrayLike) -> _Array:
        """Predicted loss at parameter counts ``n``, token counts ``d`` (ignored without D)
        and length ratios ``r``, broadcast together."""
        lr = np.log2(np.asarray(r, dtype=float))
        na = np.asarray(n, dtype=float)
        out = self.E0 + self.E1 * lr + self.A * np.power(na, -(self.alpha0 + self.alpha1 * lr))
        if self.B and d is not None:
            out = out + self.B * np.power(np.asarray(d, dtype=float), -self.beta)
        return np.asarray(out, dtype=float)

    def as_dict(self) -> dict[str, float]:
        """The parameters under ``joint_<name>`` keys, and ``joint_rms_rel``."""
        out = {f"joint_{k}": float(getattr(self, k)) for k in JOINT_NAMES}
        return out | {"joint_rms_rel": self.rms_rel}


def _joint_start(separate: dict[float, LossLawFit]) -> _Array:
    """Starting parameters from the per-ratio laws: E and alpha regressed on log2 r."""
    ratios = sorted(separate)
    lr = np.log2(ratios)
    es = np.array([separate[r].E for r in ratios])
    alphas = np.array([separate[r].alpha for r in ratios])
    e1, e0 = np.polyfit(lr, es, 1) if len(ratios) > 1 else (0.0, es[0])
    a1, a0 = np.polyfit(lr, alphas, 1) if len(ratios) > 1 else (0.0, alphas[0])
    log_a = float(np.mean(np.log([separate[r].A for r in ratios])))
    theta = [e0, e1, log_a, a0, a1]
    base = separate[ratios[0]]
    if base.two_variable:
        theta += [math.log(max(base.B, 1e-12)), base.beta]
    return np.asarray(theta, dtype=float)


def fit_joint_law(
    n: npt.ArrayLike,
    d: npt.ArrayLike | None,
    r: npt.ArrayLike,
    loss: npt.ArrayLike,
    separate: dict[float, LossLawFit],
) -> JointLaw:
    """Fit the joint law to (m,) points (n, d, r, loss) from ``separate`` (ratio -> that
    ratio's law on the same points). ``d=None``: no D term. ValueError when it fails."""
    na, ra, la = (np.asarray(v, dtype=float) for v in (n, r, loss))
    da = None if d is None else np.asarray(d, dtype=float)
    lr, ln = np.log2(ra), np.log(na)
    ld = None if da is None else np.log(da)

    def residuals(theta: _Array) -> _Array:
        pred = theta[0] + theta[1] * lr + np.exp(theta[2] - (theta[3] + theta[4] * lr) * ln)
        if ld is not None:
            pred = pred + np.exp(theta[5] - theta[6] * ld)
        return np.asarray(pred / la - 1.0)

    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        sol = optimize.least_squares(
            residuals, _joint_start(separate), method="trf", x_scale="jac",
            xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=5000,
        )  # fmt: skip
    res = residuals(sol.x)
    if not (np.all(np.isfinite(sol.x)) and np.all(np.isfinite(res))):
        raise ValueError("joint loss-law fit failed: no finite optimum")
    t = sol.x
    two = ld is not None
    return JointLaw(
        E0=float(t[0]),
        E1=float(t[1]),
        A=math.exp(t[2]),
        alpha0=float(t[3]),
        alpha1=float(t[4]),
        B=math.exp(t[5]) if two else 0.0,
        beta=float(t[6]) if two else math.nan,
        rms_rel=float(np.sqrt(np.mean(res**2))),
        n=int(na.size),
    )

"""Power-law fits with bootstrap confidence intervals: scaling laws and NTK drift exponents.

``fit_power_law(x, y)`` fits ``y = a * x**-b`` (optionally ``+ c``) by least squares on
``log y``; intervals come from a bootstrap over points, or over groups (e.g. seeds) when
``groups`` is given, so that correlated points of one seed are resampled together.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import optimize

from rope_lab.analysis.query import QueryError, check_columns, ntk_final

__all__ = ["LogLogSlope", "PowerLawFit", "drift_slope", "fit_power_law", "fits_table"]

_Array = np.ndarray[Any, np.dtype[np.float64]]


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
    """``y = a * x**-b + c`` (c = 0 without offset); ``*_ci`` are (low, high) at ``level``."""

    a: float
    b: float
    c: float
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    c_ci: tuple[float, float]
    r2: float  # of log y
    n: int  # points fitted
    n_groups: int  # bootstrap units (points, or groups when given)
    offset: bool
    level: float
    boot: _Array = dataclasses.field(repr=False, compare=False)  # (n_ok, 3): a, b, c

    def predict(self, x: Any) -> _Array:
        """Fitted curve at ``x``."""
        return _curve(np.asarray(x, dtype=float), self.a, self.b, self.c)

    def band(self, x: Any, level: float | None = None) -> tuple[_Array, _Array]:
        """Pointwise bootstrap interval of the curve at ``x`` (the fit itself when no resample)."""
        xs = np.asarray(x, dtype=float)
        if len(self.boot) < 2:
            y = self.predict(xs)
            return y, y
        lv = self.level if level is None else level
        curves = _curve(xs[None, :], self.boot[:, :1], self.boot[:, 1:2], self.boot[:, 2:3])
        lo, hi = np.nanpercentile(curves, [50 * (1 - lv), 50 * (1 + lv)], axis=0)
        return lo, hi

    def as_dict(self) -> dict[str, float | int | bool]:
        """Flat record (for tables)."""
        return {
            "a": self.a,
            "b": self.b,
            "c": self.c,
            "a_ci_low": self.a_ci[0],
            "a_ci_high": self.a_ci[1],
            "b_ci_low": self.b_ci[0],
            "b_ci_high": self.b_ci[1],
            "c_ci_low": self.c_ci[0],
            "c_ci_high": self.c_ci[1],
            "r2": self.r2,
            "n": self.n,
            "n_groups": self.n_groups,
        }


def _curve(x: Any, a: Any, b: Any, c: Any) -> Any:
    return a * np.power(x, -b) + c


def _ols(lx: _Array, ly: _Array) -> tuple[float, float]:
    """Intercept and slope of ly ~ lx."""
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(intercept), float(slope)


def _fit_once(
    x: _Array,
    y: _Array,
    offset: bool,
    c_bounds: tuple[float, float] | None,
    start: tuple[float, float, float] | None = None,
) -> tuple[float, float, float]:
    lx = np.log(x)
    if not offset:
        intercept, slope = _ols(lx, np.log(y))
        return float(np.exp(intercept)), -slope, 0.0
    ly = np.log(y)
    lo, hi = _c_range(y, c_bounds)

    def resid(p: _Array) -> _Array:
        la, b, c = p
        pred = np.exp(la) * np.exp(-b * lx) + c
        return np.log(np.maximum(pred, 1e-300)) - ly

    if start is not None and start[0] > 0 and lo <= start[2] <= hi:
        p0 = np.array([np.log(start[0]), start[1], start[2]])
    else:  # grid over c, each with the log-space OLS of y - c
        best: tuple[float, _Array] | None = None
        for c in np.linspace(lo, hi, 41):
            intercept, slope = _ols(lx, np.log(y - c))
            p_c = np.array([intercept, -slope, c])
            cost = float(np.sum(resid(p_c) ** 2))
            if best is None or cost < best[0]:
                best = (cost, p_c)
        assert best is not None
        p0 = best[1]
    sol = optimize.least_squares(
        resid,
        p0,
        bounds=([-np.inf, -np.inf, lo], [np.inf, np.inf, max(hi, lo + 1e-12)]),
        method="trf",
    )
    la, b, c = sol.x
    return float(np.exp(la)), float(b), float(c)


def _c_range(y: _Array, c_bounds: tuple[float, float] | None) -> tuple[float, float]:
    ymin = float(np.min(y))
    span = float(np.ptp(y)) or abs(ymin) or 1.0
    top = ymin - 1e-3 * span
    if c_bounds is not None:
        return float(c_bounds[0]), min(float(c_bounds[1]), top)
    return (0.0, top) if ymin > 0 else (ymin - 10 * span, top)


def resampling_units(groups: npt.NDArray[Any] | None, size: int) -> list[npt.NDArray[np.intp]]:
    """Index arrays (one per bootstrap unit) into ``size`` points: each point alone, or, with
    ``groups`` (shape (size,)), the points of each group value in order of first appearance."""
    if groups is None:
        return [np.array([i]) for i in range(size)]
    index: dict[Any, list[int]] = {}
    for i, g in enumerate(groups.tolist()):
        index.setdefault(g, []).append(i)
    return [np.array(v) for v in index.values()]


def percentile_ci(values: npt.ArrayLike, level: float) -> tuple[float, float]:
    """Central percentile interval (low, high) at ``level`` of 1-D bootstrap ``values``."""
    lo, hi = np.percentile(np.asarray(values, dtype=float), [50 * (1 - level), 50 * (1 + level)])
    return (float(lo), float(hi))


def fit_power_law(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    offset: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    groups: npt.ArrayLike | None = None,
    level: float = 0.95,
    c_bounds: tuple[float, float] | None = None,
) -> PowerLawFit:
    """Fit ``y = a x^-b`` (``+ c`` with ``offset``) by least squares in log space.

    Without offset: OLS of log y on log x (needs x, y > 0). With offset: a grid over c then
    ``scipy.optimize.least_squares`` on ``log y - log(a x^-b + c)``, with c in ``c_bounds``
    (default [0, min y) for positive y). CIs: percentile bootstrap of ``n_boot`` refits,
    resampling points, or whole groups (e.g. seeds) when ``groups`` is given. Non-finite
    points are dropped. ``r2`` is the coefficient of determination of log y. Intervals are NaN
    when they mean nothing: an exact fit (2 points, 3 with offset) or fewer than 3 resampling
    units (e.g. two seeds).
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got {xa.shape} and {ya.shape}")
    ga = None if groups is None else np.asarray(groups, dtype=object)
    if ga is not None and ga.shape != xa.shape:
        raise ValueError(f"groups must match x in length, got {ga.shape} and {xa.shape}")
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    ga = None if ga is None else ga[keep]
    if np.any(xa <= 0):
        raise ValueError("power-law fit needs x > 0")
    if not offset and np.any(ya <= 0):
        raise ValueError("power-law fit without offset needs y > 0 (use offset=True)")
    if np.unique(xa).size < 2:
        raise ValueError(f"power-law fit needs at least two distinct x values, got {xa.tolist()}")
    a, b, c = _fit_once(xa, ya, offset, c_bounds)
    ly = np.log(ya)
    pred = np.log(np.maximum(_curve(xa, a, b, c), 1e-300))
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - float(np.sum((ly - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0

    rng = np.random.default_rng(seed)
    units = resampling_units(ga, xa.size)
    boot: list[tuple[float, float, float]] = []
    if len(units) >= 3:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(n_boot):
                pick = np.concatenate([units[j] for j in rng.integers(0, len(units), len(units))])
                xb, yb = xa[pick], ya[pick]
                if np.unique(xb).size < 2:
                    continue
                try:
                    boot.append(_fit_once(xb, yb, offset, c_bounds, start=(a, b, c)))
                except (ValueError, np.linalg.LinAlgError):
                    continue
    samples = np.asarray(boot, dtype=float).reshape(-1, 3)

    def ci(i: int, est: float) -> tuple[float, float]:
        if len(samples) < 2 or len(units) < 3 or xa.size <= (3 if offset else 2):
            return (math.nan, math.nan)
        return percentile_ci(samples[:, i], level)

    return PowerLawFit(
        a=a,
        b=b,
        c=c,
        a_ci=ci(0, a),
        b_ci=ci(1, b),
        c_ci=ci(2, c),
        r2=r2,
        n=int(xa.size),
        n_groups=len(units),
        offset=offset,
        level=level,
        boot=samples,
    )


@dataclasses.dataclass(frozen=True)
class LogLogSlope:
    """Slope of log y vs log x with its bootstrap interval (``slope = -b`` of a power law)."""

    slope: float
    ci: tuple[float, float]
    r2: float
    n: int
    fit: PowerLawFit = dataclasses.field(repr=False)


def drift_slope(
    frame: pl.DataFrame,
    *,
    x: str = "model.width",
    metric: str = "distance_from_init",
    seed_col: str = "train.seed",
    n_boot: int = 1000,
    seed: int = 0,
) -> LogLogSlope:
    """Slope of log(end-of-training drift) vs log(width).

    ``frame`` is either the long NTK table (``ntk_table``; the last step of each trial, group
    ``"total"``, method ``"none"``, train probe length are used) or one row per trial holding
    ``metric`` as a column. Bootstrap over seeds when ``seed_col`` is present.
    """
    if "metric" in frame.columns and "value" in frame.columns:
        rows = ntk_final(frame, metric).rename({"value": "_y"})
    else:
        check_columns(frame, [metric], "drift")
        rows = frame.rename({metric: "_y"})
    check_columns(rows, [x], "drift x")
    groups = rows.get_column(seed_col).to_list() if seed_col in rows.columns else None
    fit = fit_power_law(
        rows.get_column(x).cast(pl.Float64).to_numpy(),
        rows.get_column("_y").cast(pl.Float64).to_numpy(),
        n_boot=n_boot,
        seed=seed,
        groups=groups,
    )
    return LogLogSlope(slope=-fit.b, ci=(-fit.b_ci[1], -fit.b_ci[0]), r2=fit.r2, n=fit.n, fit=fit)


def fits_table(
    frame: pl.DataFrame,
    *,
    x: str,
    y: str,
    by: Sequence[str] = (),
    offset: bool = False,
    group_col: str | None = "train.seed",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pl.DataFrame:
    """One power-law fit of ``y`` vs ``x`` per group of ``by``: a, b, c, CIs, r2, n.

    Bootstrap resamples ``group_col`` (seeds) when it has several values, else points. Groups
    that cannot be fitted (one x value, non-positive data) get nulls and an ``error`` message.
    """
    check_columns(frame, [x, y, *by], "fit")
    rows: list[dict[str, Any]] = []
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): frame}
    for key, part in parts.items():
        rec: dict[str, Any] = dict(zip(by, key, strict=True))
        groups = None
        if group_col and group_col in part.columns and part.get_column(group_col).n_unique() > 1:
            groups = part.get_column(group_col).to_list()
        try:
            fit = fit_power_law(
                part.get_column(x).cast(pl.Float64).to_numpy(),
                part.get_column(y).cast(pl.Float64).to_numpy(),
                offset=offset,
                n_boot=n_boot,
                seed=seed,
                groups=groups,
                level=level,
            )
            rec.update(fit.as_dict())
            rec["error"] = None
        except (ValueError, QueryError) as e:
            rec["error"] = str(e)
        rows.append(rec)
    floats = ["a", "b", "c", "a_ci_low", "a_ci_high", "b_ci_low", "b_ci_high", "c_ci_low"]
    floats += ["c_ci_high", "r2"]
    cols = [*by, *floats, "n", "n_groups", "error"]
    schema = {c: frame.schema[c] for c in by}
    schema.update({c: pl.Float64() for c in floats})
    schema.update({"n": pl.Int64(), "n_groups": pl.Int64(), "error": pl.String()})
    return pl.DataFrame([{c: r.get(c) for c in cols} for r in rows], schema=schema, orient="row")

"""Loss laws ``L(N, D) = E + A / N**alpha + B / D**beta`` fitted as Hoffmann et al. (2022) do.

Approach 3 of Hoffmann et al. ("Chinchilla"), as replicated by Besiroglu et al. (2024): with
``a, b, e = log A, log B, log E`` the log-loss predicted at (N, D) is

    LSE(a - alpha log N, b - beta log D, e)

and ``(e, a, alpha, b, beta)`` minimise the sum over points of the Huber loss (``delta = 1e-3``)
of ``LSE(...) - log L``, by L-BFGS-B from a grid of initialisations (alpha, beta in
{0, .5, ..., 2}, e in {-1, -.5, ..., 1.5}, a, b in {0, 5, ..., 25}: 4500 starts).

Speed: the objective and its analytic gradient are vectorised over points, and over starts
when the whole grid is scored at once. By default (``n_starts=16``) the objective is evaluated
on all 4500 grid points and L-BFGS-B runs from the 16 best of them only; ``n_starts=None`` runs
it from every grid point (Hoffmann's full multi-start, far slower). On the noiseless and noisy
data of ``tests/analysis/test_loss_law.py`` both reach the same optimum (to 1e-6 in every
parameter).
Bootstrap refits start from the full-data optimum only (scoring the grid again and a second
start from its best point would cost several times as much per refit). Timings:
benchmarks/RESULTS.md, "Figures moved from rope_lab's docstrings".

``d=None`` fits the one-variable law ``L(N) = E + A / N**alpha`` (D constant, e.g. a sweep over
width at a fixed token budget): the same objective without the B term, from the (e, a, alpha)
grid. Held-out checks and the per-group table: `rope_lab.analysis.loss_law_table`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize
from threadpoolctl import threadpool_limits

from rope_lab.analysis.fits import percentile_ci, resampling_units

__all__ = ["HOFFMANN_GRID", "MIN_DISTINCT", "LossLawFit", "as_1d", "fit_loss_law", "huber"]

_Array = np.ndarray[Any, np.dtype[np.float64]]

# Hoffmann et al.'s initialisation grid, per parameter (log-space constants a, b, e).
HOFFMANN_GRID: dict[str, tuple[float, ...]] = {
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
}
_NAMES = ("E", "A", "alpha", "B", "beta")  # natural parameters, in the order of theta
MIN_DISTINCT = 3  # distinct N (and D) values needed to identify a power-law term and E


def _log_floor(value: float) -> float:
    return math.log(max(value, sys.float_info.min))


@dataclasses.dataclass(frozen=True)
class LossLawFit:
    """``L = E + A / N**alpha + B / D**beta`` (one-variable: B = 0, beta NaN).

    ``*_ci`` are percentile-bootstrap (low, high) intervals at ``level`` (NaN when they mean
    nothing: an exact fit, fewer than 3 resampling units, or a term the law does not have).
    ``objective`` is the sum over points of the Huber loss of the log residuals at the fit.
    """

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    E_ci: tuple[float, float]
    A_ci: tuple[float, float]
    alpha_ci: tuple[float, float]
    B_ci: tuple[float, float]
    beta_ci: tuple[float, float]
    objective: float
    n: int  # points fitted
    n_groups: int  # bootstrap units (points, or groups when given)
    two_variable: bool
    delta: float
    level: float
    boot: _Array = dataclasses.field(repr=False, compare=False)  # (n_ok, 5): E, A, alpha, B, beta

    def predict(self, n: npt.ArrayLike, d: npt.ArrayLike | None = None) -> _Array:
        """Predicted loss at parameter counts ``n`` and token counts ``d`` (broadcast together;
        ``d`` is ignored, and may be None, for the one-variable law)."""
        na = np.asarray(n, dtype=float)
        out = self.E + self.A * np.power(na, -self.alpha)
        if not self.two_variable:
            return np.asarray(out, dtype=float)
        if d is None:
            raise ValueError("a two-variable loss law needs d to predict")
        return np.asarray(out + self.B * np.power(np.asarray(d, dtype=float), -self.beta))

    def theta(self) -> _Array:
        """The fitted law as an optimiser start: (log E, log A, alpha[, log B, beta]). A term
        whose exp underflowed to 0 (E of a law with no floor) starts at the log of the
        smallest positive float: the same law to rounding, and a finite start."""
        head = [_log_floor(self.E), _log_floor(self.A), self.alpha]
        tail = [_log_floor(self.B), self.beta] if self.two_variable else []
        return np.asarray(head + tail, dtype=float)

    def as_dict(self) -> dict[str, float | int | bool]:
        """Flat record (for tables): estimates, ``<name>_ci_low/high``, objective, n, ...."""
        rec: dict[str, float | int | bool] = {}
        for name in _NAMES:
            rec[name] = getattr(self, name)
        for name in _NAMES:
            lo, hi = getattr(self, f"{name}_ci")
            rec[f"{name}_ci_low"], rec[f"{name}_ci_high"] = lo, hi
        rec.update(
            objective=self.objective,
            n=self.n,
            n_groups=self.n_groups,
            two_variable=self.two_variable,
            delta=self.delta,
        )
        return rec


def huber(r: npt.ArrayLike, delta: float) -> _Array:
    """Huber loss of residuals ``r`` (any shape, elementwise): ``r**2 / 2`` for ``|r| <= delta``,
    else ``delta * (|r| - delta / 2)``; ``delta = inf`` gives squared error / 2."""
    ra = np.abs(np.asarray(r, dtype=float))
    if math.isinf(delta):
        return np.asarray(0.5 * ra * ra)
    return np.asarray(np.where(ra <= delta, 0.5 * ra * ra, delta * (ra - 0.5 * delta)))


def _log_terms(theta: _Array, ln: _Array, ld: _Array | None) -> _Array:
    """Log of each term of the law: theta (..., P) -> (..., n, K) with K = 2 or 3 (e first)."""
    e = np.broadcast_to(theta[..., 0:1], (*theta.shape[:-1], ln.size))
    parts = [e, theta[..., 1:2] - theta[..., 2:3] * ln]
    if ld is not None:
        parts.append(theta[..., 3:4] - theta[..., 4:5] * ld)
    return np.stack(parts, axis=-1)


def _residuals(theta: _Array, ln: _Array, ld: _Array | None, ly: _Array) -> tuple[_Array, _Array]:
    """Log residuals (..., n) = LSE(terms) - log L and the terms' softmax weights (..., n, K)."""
    z = _log_terms(theta, ln, ld)
    top = z.max(axis=-1, keepdims=True)
    ez = np.exp(z - top)
    total = ez.sum(axis=-1)
    r = top[..., 0] + np.log(total) - ly
    return r, ez / total[..., None]


def _objective(theta: _Array, ln: _Array, ld: _Array | None, ly: _Array, delta: float) -> _Array:
    """Summed Huber loss of the log residuals: theta (..., P) -> (...)."""
    r, _ = _residuals(theta, ln, ld, ly)
    return np.asarray(huber(r, delta).sum(axis=-1))


def _value_and_grad(
    theta: _Array, ln: _Array, ld: _Array | None, ly: _Array, delta: float, scale: float
) -> tuple[float, _Array]:
    """Objective / scale and its gradient at one theta (P,) (L-BFGS-B's callback)."""
    r, w = _residuals(theta, ln, ld, ly)
    psi = np.clip(r, -delta, delta)  # d huber / d r
    pw = psi[:, None] * w  # (n, K): d objective / d (log term k) per point
    grad = [pw[:, 0].sum(), pw[:, 1].sum(), -(pw[:, 1] * ln).sum()]
    if ld is not None:
        grad += [pw[:, 2].sum(), -(pw[:, 2] * ld).sum()]
    return float(huber(r, delta).sum()) / scale, np.asarray(grad) / scale


def _grid(two_variable: bool) -> _Array:
    """Hoffmann's initialisations as rows of theta: (4500, 5), or (180, 3) without D."""
    names = ("e", "a", "alpha", "b", "beta") if two_variable else ("e", "a", "alpha")
    return np.array(list(itertools.product(*(HOFFMANN_GRID[k] for k in names))), dtype=float)


def _centre(theta: _Array, cn: float, cd: float, sign: float) -> _Array:
    """theta with a -> a - sign alpha cn (and b -> b - sign beta cd): the same law in log N - cn
    (log D - cd); sign -1 maps back."""
    out = np.array(theta, dtype=float)
    out[..., 1] -= sign * out[..., 2] * cn
    if out.shape[-1] == 5:
        out[..., 3] -= sign * out[..., 4] * cd
    return out


def _minimise(
    starts: _Array, ln: _Array, ld: _Array | None, ly: _Array, delta: float
) -> tuple[_Array, float]:
    """Best L-BFGS-B optimum (theta, objective) over the rows of ``starts`` (S, P)."""
    # Scaled by 1/delta the objective is ~ sum |r| (gradients O(1)); the tolerances are tight
    # because Hoffmann et al.'s published fit stopped short of the optimum (Besiroglu et al.).
    # L-BFGS-B runs in centred log N and log D: a and alpha (b and beta) are then far less
    # correlated (fewer iterations, optima closer to exact on noiseless data; see
    # benchmarks/RESULTS.md).
    scale = min(delta, 1.0)
    cn, cd = float(ln.mean()), 0.0 if ld is None else float(ld.mean())
    lnc, ldc = ln - cn, None if ld is None else ld - cd
    best: tuple[_Array, float] | None = None
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        for start in _centre(starts, cn, cd, 1.0):
            sol = optimize.minimize(
                _value_and_grad,
                start,
                args=(lnc, ldc, ly, delta, scale),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-11, "maxcor": 20},
            )
            if not np.all(np.isfinite(sol.x)):
                continue
            value = float(_objective(sol.x, lnc, ldc, ly, delta))
            if np.isfinite(value) and (best is None or value < best[1]):
                best = (_centre(sol.x, cn, cd, -1.0), value)
    if best is None:
        raise ValueError("loss-law fit failed: no start reached a finite objective")
    return best


def _best_grid_rows(grid: _Array, k: int | None, ln, ld, ly, delta: float) -> _Array:
    """The ``k`` grid rows of lowest objective (all rows when k is None), best first."""
    if k is None or k >= len(grid):
        return grid
    with np.errstate(over="ignore", invalid="ignore"):
        values = _objective(grid, ln, ld, ly, delta)
    order = np.argsort(np.where(np.isfinite(values), values, np.inf), kind="stable")
    return grid[order[:k]]


def _natural(theta: _Array) -> tuple[float, float, float, float, float]:
    """(E, A, alpha, B, beta) from theta = (e, a, alpha[, b, beta])."""
    e, a, alpha = (float(v) for v in theta[:3])
    if theta.size == 3:
        return math.exp(e), math.exp(a), alpha, 0.0, math.nan
    return math.exp(e), math.exp(a), alpha, math.exp(float(theta[3])), float(theta[4])


def as_1d(name: str, values: npt.ArrayLike, size: int | None = None) -> _Array:
    """``values`` as a 1-D float array (of ``size`` values when given); ValueError otherwise."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if size is not None and arr.size != size:
        raise ValueError(f"{name} has {arr.size} values, n has {size}: lengths must match")
    return arr


def _prepare(
    n: npt.ArrayLike, d: npt.ArrayLike | None, loss: npt.ArrayLike, groups: npt.ArrayLike | None
) -> tuple[_Array, _Array | None, _Array, npt.NDArray[Any] | None]:
    """Validated 1-D float arrays (non-finite points dropped) and groups, equal lengths."""
    na = as_1d("n", n)
    la = as_1d("loss", loss, na.size)
    da = None if d is None else as_1d("d", d, na.size)
    ga = None if groups is None else np.asarray(groups, dtype=object)
    if ga is not None and ga.shape != na.shape:
        raise ValueError(f"groups has shape {ga.shape}, n has {na.shape}: lengths must match")
    keep = np.isfinite(na) & np.isfinite(la)
    if da is not None:
        keep &= np.isfinite(da)
    na, la = na[keep], la[keep]
    da = None if da is None else da[keep]
    ga = None if ga is None else ga[keep]
    for name, arr in (("n", na), ("d", da), ("loss", la)):
        if arr is not None and np.any(arr <= 0):
            raise ValueError(f"loss-law fit needs {name} > 0, got min {float(np.min(arr))}")
    params = 3 if da is None else 5
    if na.size < params:
        raise ValueError(
            f"loss-law fit of {params} parameters needs at least {params} points, got {na.size}"
        )
    if np.unique(na).size < MIN_DISTINCT:
        raise ValueError(
            f"loss-law fit needs at least {MIN_DISTINCT} distinct n values, "
            f"got {np.unique(na).tolist()}"
        )
    if da is not None and np.unique(da).size < MIN_DISTINCT:
        constant = np.unique(da).size == 1
        hint = " (d is constant: pass d=None for L(N) = E + A/N^alpha)" if constant else ""
        raise ValueError(
            f"loss-law fit needs at least {MIN_DISTINCT} distinct d values, "
            f"got {np.unique(da).tolist()}{hint}"
        )
    return na, da, la, ga


def fit_loss_law(
    n: npt.ArrayLike,
    d: npt.ArrayLike | None,
    loss: npt.ArrayLike,
    *,
    groups: npt.ArrayLike | None = None,
    delta: float = 1e-3,
    n_boot: int = 500,
    level: float = 0.95,
    seed: int = 0,
    n_starts: int | None = 16,
    starts: npt.ArrayLike | None = None,
) -> LossLawFit:
    """Fit ``L = E + A / N**alpha + B / D**beta`` to points (n, d, loss), each of shape (m,).

    Minimises the summed Huber loss (``delta``; ``inf``: least squares) of
    ``LSE(a - alpha log N, b - beta log D, e) - log L`` over (e, a, alpha, b, beta) with
    L-BFGS-B, from the ``n_starts`` best points of Hoffmann et al.'s grid (None: all 4500).
    ``d=None`` fits ``L = E + A / N**alpha``. Non-finite points are dropped. CIs: percentile
    bootstrap of ``n_boot`` refits resampling points, or whole groups (shape (m,), e.g. seeds)
    when ``groups`` is given. ``starts`` (k, 5) or (k, 3): further L-BFGS starts as
    `LossLawFit.theta` gives them (e.g. a fit of most of the same points). ValueError for
    mismatched lengths, non-positive values, fewer points than parameters (5, or 3 without d)
    or fewer than 3 distinct n (or d) values.
    """
    na, da, la, ga = _prepare(n, d, loss, groups)
    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    # L-BFGS-B's 5-variable linear algebra gains nothing from BLAS threads, and on a loaded
    # 2-core machine their hand-offs made a fit several times slower (benchmarks/RESULTS.md)
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit(na, da, la, ga, delta, n_boot, level, seed, n_starts, starts)


def _fit(
    na: _Array,
    da: _Array | None,
    la: _Array,
    ga: npt.NDArray[Any] | None,
    delta: float,
    n_boot: int,
    level: float,
    seed: int,
    n_starts: int | None,
    starts: npt.ArrayLike | None = None,
) -> LossLawFit:
    ln, ly = np.log(na), np.log(la)
    ld = None if da is None else np.log(da)
    grid = _grid(da is not None)
    rows = _best_grid_rows(grid, n_starts, ln, ld, ly, delta)
    if starts is not None:
        rows = np.vstack([np.asarray(starts, dtype=float).reshape(-1, grid.shape[1]), rows])
    theta, value = _minimise(rows, ln, ld, ly, delta)

    rng = np.random.default_rng(seed)
    units = resampling_units(ga, na.size)
    params = theta.size
    boot: list[tuple[float, ...]] = []
    if len(units) >= 3 and na.size > params:
        for _ in range(n_boot):
            pick = np.concatenate([units[j] for j in rng.integers(0, len(units), len(units))])
            lnb, lyb = ln[pick], ly[pick]
            ldb = None if ld is None else ld[pick]
            if np.unique(lnb).size < MIN_DISTINCT or (
                ldb is not None and np.unique(ldb).size < MIN_DISTINCT
            ):
                continue
            try:
                boot.append(_natural(_minimise(theta[None], lnb, ldb, lyb, delta)[0]))
            except ValueError:
                continue
    samples = np.asarray(boot, dtype=float).reshape(-1, 5)
    estimates = _natural(theta)

    def ci(i: int) -> tuple[float, float]:
        if len(samples) < 2 or not np.all(np.isfinite(samples[:, i])):
            return (math.nan, math.nan)
        return percentile_ci(samples[:, i], level)

    fields: dict[str, Any] = dict(zip(_NAMES, estimates, strict=True))
    fields.update({f"{name}_ci": ci(i) for i, name in enumerate(_NAMES)})
    return LossLawFit(
        **fields,
        objective=value,
        n=int(na.size),
        n_groups=len(units),
        two_variable=da is not None,
        delta=float(delta),
        level=level,
        boot=samples,
    )

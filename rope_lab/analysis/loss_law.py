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
it from every grid point (Hoffmann's full multi-start, ~300x slower). On the noiseless and noisy
data of ``tests/analysis/test_loss_law.py`` both reach the same optimum (to 1e-6 in every
parameter).
Bootstrap refits start from the full-data optimum only (~9 ms each for 30 points; scoring the
grid again and a second start from its best point would cost ~80 ms more per refit).

``d=None`` fits the one-variable law ``L(N) = E + A / N**alpha`` (D constant, e.g. a sweep over
width at a fixed token budget): the same objective without the B term, from the (e, a, alpha)
grid. ``held_out_check`` fits on all points but those with the largest N (or a given mask) and
returns the relative errors of the predictions at the held-out points.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import itertools
import math
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import optimize

from rope_lab.analysis.fits import percentile_ci, resampling_units

__all__ = [
    "HOFFMANN_GRID",
    "HeldOutCheck",
    "LossLawFit",
    "fit_loss_law",
    "held_out_check",
    "huber",
    "loss_law_table",
]

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
_MIN_DISTINCT = 3  # distinct N (and D) values needed to identify a power-law term and E


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


@functools.cache
def _openblas_thread_controls() -> tuple[tuple[Any, Any], ...]:
    """(get, set) thread-count functions of every OpenBLAS already loaded (numpy's, scipy's);
    empty where /proc/self/maps is missing (not Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return ()
    controls = []
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so[\w.]*)", maps))):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        for name in ("scipy_openblas_{}64_", "scipy_openblas_{}", "openblas_{}64_", "openblas_{}"):
            get = getattr(lib, name.format("get_num_threads"), None)
            put = getattr(lib, name.format("set_num_threads"), None)
            if get is not None and put is not None:
                controls.append((get, put))
                break
    return tuple(controls)


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Run the block with OpenBLAS single-threaded (restored after).

    L-BFGS-B's 5-variable linear algebra gains nothing from BLAS threads, and on a loaded 2-core
    machine their hand-offs made each ``setulb`` call ~0.4 ms instead of ~10 us (a 16-start fit
    took 9 s instead of 0.3 s).
    """
    controls = _openblas_thread_controls()
    before = [get() for get, _ in controls]
    for _, put in controls:
        put(1)
    try:
        yield
    finally:
        for (_, put), count in zip(controls, before, strict=True):
            put(count)


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
    # correlated (30-40% fewer iterations, optima closer to exact on noiseless data).
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


def _as_1d(name: str, values: npt.ArrayLike, size: int | None = None) -> _Array:
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
    na = _as_1d("n", n)
    la = _as_1d("loss", loss, na.size)
    da = None if d is None else _as_1d("d", d, na.size)
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
    if np.unique(na).size < _MIN_DISTINCT:
        raise ValueError(
            f"loss-law fit needs at least {_MIN_DISTINCT} distinct n values, "
            f"got {np.unique(na).tolist()}"
        )
    if da is not None and np.unique(da).size < _MIN_DISTINCT:
        constant = np.unique(da).size == 1
        hint = " (d is constant: pass d=None for L(N) = E + A/N^alpha)" if constant else ""
        raise ValueError(
            f"loss-law fit needs at least {_MIN_DISTINCT} distinct d values, "
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
) -> LossLawFit:
    """Fit ``L = E + A / N**alpha + B / D**beta`` to points (n, d, loss), each of shape (m,).

    Minimises the summed Huber loss (``delta``; ``inf``: least squares) of
    ``LSE(a - alpha log N, b - beta log D, e) - log L`` over (e, a, alpha, b, beta) with
    L-BFGS-B, from the ``n_starts`` best points of Hoffmann et al.'s grid (None: all 4500).
    ``d=None`` fits ``L = E + A / N**alpha``. Non-finite points are dropped. CIs: percentile
    bootstrap of ``n_boot`` refits resampling points, or whole groups (shape (m,), e.g. seeds)
    when ``groups`` is given. ValueError for mismatched lengths, non-positive values, fewer
    points than parameters (5, or 3 without d) or fewer than 3 distinct n (or d) values.
    """
    na, da, la, ga = _prepare(n, d, loss, groups)
    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    with _one_blas_thread():
        return _fit(na, da, la, ga, delta, n_boot, level, seed, n_starts)


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
) -> LossLawFit:
    ln, ly = np.log(na), np.log(la)
    ld = None if da is None else np.log(da)
    grid = _grid(da is not None)
    theta, value = _minimise(_best_grid_rows(grid, n_starts, ln, ld, ly, delta), ln, ld, ly, delta)

    rng = np.random.default_rng(seed)
    units = resampling_units(ga, na.size)
    params = theta.size
    boot: list[tuple[float, ...]] = []
    if len(units) >= 3 and na.size > params:
        for _ in range(n_boot):
            pick = np.concatenate([units[j] for j in rng.integers(0, len(units), len(units))])
            lnb, lyb = ln[pick], ly[pick]
            ldb = None if ld is None else ld[pick]
            if np.unique(lnb).size < _MIN_DISTINCT or (
                ldb is not None and np.unique(ldb).size < _MIN_DISTINCT
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


@dataclasses.dataclass(frozen=True)
class HeldOutCheck:
    """Extrapolation check: a fit without the held-out points and its errors on them.

    ``held_out`` (m,) marks the held-out points among the inputs; ``n``, ``d``, ``loss``,
    ``predicted`` and ``rel_error = predicted / loss - 1`` are (h,) over those points
    (``d`` is None for the one-variable law).
    """

    fit: LossLawFit
    held_out: npt.NDArray[np.bool_]
    n: _Array
    d: _Array | None
    loss: _Array
    predicted: _Array
    rel_error: _Array

    @property
    def max_abs_rel_error(self) -> float:
        """Largest |relative error| over the held-out points."""
        return float(np.max(np.abs(self.rel_error)))

    def as_frame(self) -> pl.DataFrame:
        """One row per held-out point: n, d (two-variable), loss, predicted, rel_error."""
        cols: dict[str, Any] = {"n": self.n}
        if self.d is not None:
            cols["d"] = self.d
        cols.update(loss=self.loss, predicted=self.predicted, rel_error=self.rel_error)
        return pl.DataFrame(cols)


def held_out_check(
    n: npt.ArrayLike,
    d: npt.ArrayLike | None,
    loss: npt.ArrayLike,
    *,
    held_out: npt.ArrayLike | None = None,
    groups: npt.ArrayLike | None = None,
    delta: float = 1e-3,
    n_boot: int = 0,
    level: float = 0.95,
    seed: int = 0,
    n_starts: int | None = 16,
) -> HeldOutCheck:
    """Fit the loss law on all points (m,) but the held-out ones and predict those.

    ``held_out``: boolean mask (m,) of the points to hold out; default every point at the
    largest n (the extrapolation in model size). The fit (``fit_loss_law`` with the other
    arguments, no bootstrap by default) sees only the remaining points; returns the held-out
    points, their predictions and relative errors ``predicted / loss - 1``.
    """
    na = _as_1d("n", n)
    la = _as_1d("loss", loss, na.size)
    da = None if d is None else _as_1d("d", d, na.size)
    if held_out is None:
        mask = np.isfinite(na) & (na == np.nanmax(na))
    else:
        mask = np.asarray(held_out)
        if mask.dtype != np.bool_ or mask.shape != na.shape:
            raise ValueError(f"held_out must be a boolean mask of shape {na.shape}")
    if not mask.any() or mask.all():
        raise ValueError("held_out must leave out some points and keep others")
    ga = None if groups is None else np.asarray(groups, dtype=object)
    if ga is not None and ga.shape != na.shape:
        raise ValueError(f"groups has shape {ga.shape}, n has {na.shape}: lengths must match")
    keep = ~mask
    fit = fit_loss_law(
        na[keep],
        None if da is None else da[keep],
        la[keep],
        groups=None if ga is None else ga[keep],
        delta=delta,
        n_boot=n_boot,
        level=level,
        seed=seed,
        n_starts=n_starts,
    )
    dh = None if da is None else da[mask]
    predicted = fit.predict(na[mask], dh)
    return HeldOutCheck(
        fit=fit,
        held_out=mask,
        n=na[mask],
        d=dh,
        loss=la[mask],
        predicted=predicted,
        rel_error=predicted / la[mask] - 1.0,
    )


LAW_COLUMNS = ("E", "A", "alpha", "B", "beta")


def loss_law_table(
    frame: pl.DataFrame,
    *,
    n: str = "n_params_non_embedding",
    d: str = "tokens_seen",
    y: str = "loss",
    by: tuple[str, ...] = (),
    group_col: str | None = "train.seed",
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """One loss-law fit per group of ``by`` over the rows of ``frame`` (one row per trial):
    ``L(N, D)`` when column ``d`` takes at least 3 values in the group, else ``L(N)``.

    Columns: ``by``..., ``law``, the estimates and ``<name>_ci_low/high`` of E, A, alpha, B,
    beta (bootstrap over ``group_col`` when it varies, else over points), ``objective``,
    ``n``, ``n_groups``, ``heldout_points`` and ``heldout_max_rel_error`` (the fit without the
    largest N predicting it: `held_out_check`; null when too few N remain) and ``error`` (why
    a group could not be fitted; the other values then null)."""
    missing = [c for c in (n, d, y, *by) if c not in frame.columns]
    if missing:
        raise ValueError(f"loss-law fit: no column(s) {missing}; columns are {frame.columns}")
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): frame}
    rows: list[dict[str, Any]] = []
    for key, part in parts.items():
        rec: dict[str, Any] = dict(zip(by, key, strict=True))
        ns = part.get_column(n).cast(pl.Float64).to_numpy()
        ds = part.get_column(d).cast(pl.Float64).to_numpy()
        ys = part.get_column(y).cast(pl.Float64).to_numpy()
        dd = ds if np.unique(ds[np.isfinite(ds)]).size >= _MIN_DISTINCT else None
        groups = None
        if group_col and group_col in part.columns and part.get_column(group_col).n_unique() > 1:
            groups = part.get_column(group_col).to_numpy()
        rec["law"] = "L(N, D)" if dd is not None else "L(N)"
        try:
            fit = fit_loss_law(ns, dd, ys, groups=groups, n_boot=n_boot, level=level, seed=seed)
        except ValueError as e:
            rows.append({**rec, "error": str(e)})
            continue
        rec.update(fit.as_dict())
        rec.pop("two_variable"), rec.pop("delta")
        try:
            check = held_out_check(ns, dd, ys, groups=groups, seed=seed)
            rec["heldout_points"] = int(check.held_out.sum())
            rec["heldout_max_rel_error"] = check.max_abs_rel_error
        except ValueError:
            pass
        rows.append({**rec, "error": None})
    floats = [*LAW_COLUMNS, *(f"{c}_ci_{s}" for c in LAW_COLUMNS for s in ("low", "high"))]
    floats += ["objective", "heldout_max_rel_error"]
    schema: dict[str, Any] = {c: frame.schema[c] for c in by}
    schema["law"] = pl.String()
    schema.update({c: pl.Float64() for c in floats})
    schema.update(
        {
            "n": pl.Int64(),
            "n_groups": pl.Int64(),
            "heldout_points": pl.Int64(),
            "error": pl.String(),
        }
    )
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")

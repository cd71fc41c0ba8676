"""IsoFLOP profiles and the compute-optimal frontier (Hoffmann et al. 2022, approach 2).

Trials are grouped by training compute C: a recorded FLOPs column when the rows have one, else
``C = 6 N D`` (N the size column, D the training tokens). Compute values are bucketed: sorted,
a bucket opens at its smallest C and holds every C up to ``(1 + tolerance)`` times it
(``COMPUTE_TOLERANCE = 0.1``: within 10%); the bucket's C is the geometric mean of its members.

Each bucket is one isoFLOP profile. With at least 3 distinct N its loss is fitted by a parabola
in ``log N`` (least squares over every trial of the profile); the vertex is ``N*(C)`` and
``D*(C) = C / (6 N*)``. A profile is refused, with the reason, when it has fewer than 3 distinct
N, when the parabola opens downward, or when its vertex lies outside the sampled N range (never
extrapolated). Intervals: percentile bootstrap resampling, within each N, the trials (seeds) at
that N; none when no N has more than one trial.

The frontier ``N* = k C^a`` is a least-squares line of ``log N*`` on ``log C`` over the accepted
profiles of a group (at least 2); the same line refitted on each bootstrap replicate of the
profile minima gives its interval. ``D* = C / (6 N*)`` makes ``b = 1 - a`` exactly, with the
interval ``(1 - a_high, 1 - a_low)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from rope_lab.analysis.fit_groups import check_one_scale
from rope_lab.analysis.fits import percentile_ci

__all__ = [
    "COMPUTE_TOLERANCE",
    "MIN_PROFILE_SIZES",
    "ProfileFit",
    "compute_buckets",
    "fit_frontier",
    "fit_profile",
    "isoflop_tables",
]

COMPUTE_TOLERANCE: Final = 0.1  # C within 10% of a bucket's smallest C share its profile
MIN_PROFILE_SIZES: Final = 3  # distinct N a parabola in log N needs
MIN_FRONTIER_PROFILES: Final = 2

_Array = np.ndarray[Any, np.dtype[np.float64]]


@dataclasses.dataclass(frozen=True)
class ProfileFit:
    """One isoFLOP profile's parabola ``loss = c0 + c1 log N + c2 log^2 N`` and its vertex.

    ``n_star``/``d_star`` and ``*_ci`` (percentile bootstrap at ``level``; NaN without
    resampling) are NaN and ``error`` says why when the profile is refused; ``boot`` (n_boot,)
    holds the replicates' log N* (NaN where a replicate's parabola opens downward).
    """

    compute: float
    n_points: int
    n_distinct: int
    n_range: tuple[float, float]
    coefficients: tuple[float, float, float]
    n_star: float
    n_star_ci: tuple[float, float]
    d_star: float
    d_star_ci: tuple[float, float]
    loss_at_min: float
    error: str | None
    boot: _Array = dataclasses.field(repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """Flat record for tables (coefficients as c0, c1, c2)."""
        c0, c1, c2 = self.coefficients
        return {
            "compute": self.compute,
            "n_points": self.n_points,
            "n_distinct": self.n_distinct,
            "n_min": self.n_range[0],
            "n_max": self.n_range[1],
            "n_star": self.n_star,
            "n_star_ci_low": self.n_star_ci[0],
            "n_star_ci_high": self.n_star_ci[1],
            "d_star": self.d_star,
            "d_star_ci_low": self.d_star_ci[0],
            "d_star_ci_high": self.d_star_ci[1],
            "loss_at_min": self.loss_at_min,
            "c0": c0,
            "c1": c1,
            "c2": c2,
            "error": self.error,
        }


def compute_buckets(compute: npt.ArrayLike, tolerance: float = COMPUTE_TOLERANCE) -> _Array:
    """The bucket compute of each value of ``compute`` (m,) -> (m,): sorted values join the open
    bucket while at most ``(1 + tolerance)`` times its smallest value; each value maps to the
    geometric mean of its bucket."""
    c = np.asarray(compute, dtype=float)
    if c.ndim != 1 or not np.all(np.isfinite(c) & (c > 0)):
        raise ValueError("compute must be finite and positive (one value per trial)")
    order = np.argsort(c, kind="stable")
    out = np.empty_like(c)
    start = 0
    while start < c.size:
        stop = start
        first = c[order[start]]
        while stop < c.size and c[order[stop]] <= first * (1 + tolerance):
            stop += 1
        members = order[start:stop]
        out[members] = math.exp(float(np.mean(np.log(c[members]))))
        start = stop
    return out


def _parabola(x: _Array, y: _Array) -> tuple[float, float, float]:
    c2, c1, c0 = np.polyfit(x, y, 2)
    return float(c0), float(c1), float(c2)


def fit_profile(
    compute: float,
    n: npt.ArrayLike,
    loss: npt.ArrayLike,
    *,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> ProfileFit:
    """Parabola in ``log n`` through the losses of one isoFLOP profile (n, loss: (m,)) and its
    vertex N*, D* = compute / (6 N*), with bootstrap intervals resampling the points at each N.
    Refused (``error`` set, N* NaN) below 3 distinct N, for a downward parabola, or for a
    vertex outside the sampled N range."""
    na = np.asarray(n, dtype=float)
    la = np.asarray(loss, dtype=float)
    keep = np.isfinite(na) & (na > 0) & np.isfinite(la)
    na, la = na[keep], la[keep]
    sizes = np.unique(na)
    nan2 = (math.nan, math.nan)
    refused = dict(
        compute=compute,
        n_points=int(na.size),
        n_distinct=int(sizes.size),
        n_range=(float(sizes.min()), float(sizes.max())) if sizes.size else nan2,
        n_star=math.nan,
        n_star_ci=nan2,
        d_star=math.nan,
        d_star_ci=nan2,
        loss_at_min=math.nan,
        boot=np.full(0, math.nan),
    )
    if sizes.size < MIN_PROFILE_SIZES:
        return ProfileFit(
            **refused,  # type: ignore[arg-type]
            coefficients=(math.nan,) * 3,  # type: ignore[arg-type]
            error=f"{sizes.size} distinct N; a parabola in log N needs at least "
            f"{MIN_PROFILE_SIZES}",
        )
    x = np.log(na)
    coef = _parabola(x, la)
    c0, c1, c2 = coef
    if c2 <= 0:
        return ProfileFit(
            **refused,  # type: ignore[arg-type]
            coefficients=coef,
            error="the parabola in log N opens downward (no minimum)",
        )
    x_star = -c1 / (2 * c2)
    lo, hi = float(x.min()), float(x.max())
    if not lo <= x_star <= hi:
        return ProfileFit(
            **refused,  # type: ignore[arg-type]
            coefficients=coef,
            error=f"minimum N*={math.exp(x_star):.4g} outside the sampled N range "
            f"[{math.exp(lo):.4g}, {math.exp(hi):.4g}]",
        )
    boot = _bootstrap_vertex(x, la, n_boot, seed)
    ok = boot[np.isfinite(boot)]
    ci = nan2
    if ok.size >= 2 and np.ptp(ok) > 0:
        ci = percentile_ci(ok, level)
    n_star = math.exp(x_star)
    n_ci = (math.exp(ci[0]), math.exp(ci[1])) if np.isfinite(ci[0]) else nan2
    d_ci = (compute / (6 * n_ci[1]), compute / (6 * n_ci[0])) if np.isfinite(ci[0]) else nan2
    return ProfileFit(
        compute=compute,
        n_points=int(na.size),
        n_distinct=int(sizes.size),
        n_range=(math.exp(lo), math.exp(hi)),
        coefficients=coef,
        n_star=n_star,
        n_star_ci=n_ci,
        d_star=compute / (6 * n_star),
        d_star_ci=d_ci,
        loss_at_min=c0 + c1 * x_star + c2 * x_star**2,
        error=None,
        boot=boot,
    )


def _bootstrap_vertex(x: _Array, y: _Array, n_boot: int, seed: int) -> _Array:
    """log N* of ``n_boot`` refits, each resampling with replacement the points at every N
    (empty when no N has two points)."""
    cells = [np.flatnonzero(x == v) for v in np.unique(x)]
    if n_boot <= 0 or all(c.size < 2 for c in cells):
        return np.full(0, math.nan)
    rng = np.random.default_rng(seed)
    out = np.full(n_boot, math.nan)
    for r in range(n_boot):
        idx = np.concatenate([rng.choice(c, size=c.size, replace=True) for c in cells])
        _, c1, c2 = _parabola(x[idx], y[idx])
        if c2 > 0:
            out[r] = -c1 / (2 * c2)
    return out


def fit_frontier(
    profiles: Sequence[ProfileFit], *, level: float = 0.95
) -> dict[str, float | int | str | None]:
    """Exponents of ``N* ∝ C^a`` and ``D* ∝ C^b`` (b = 1 - a) over the accepted profiles:
    least squares of log N* on log C; interval from the same fit on each bootstrap replicate
    (replicate r of every profile). Keys: n_profiles, a, a_ci_low/high, b, b_ci_low/high, k
    (N* = k C^a), error (why there is no frontier; the numbers then NaN)."""
    good = [p for p in profiles if p.error is None]
    rec: dict[str, float | int | str | None] = {"n_profiles": len(good)}
    nan = dict.fromkeys(("a", "a_ci_low", "a_ci_high", "b", "b_ci_low", "b_ci_high", "k"), math.nan)
    computes = {p.compute for p in good}
    if len(computes) < MIN_FRONTIER_PROFILES:
        return (
            rec
            | nan
            | {
                "error": f"{len(computes)} accepted profile(s); the frontier needs at least "
                f"{MIN_FRONTIER_PROFILES} compute budgets"
            }
        )
    lc = np.log([p.compute for p in good])
    ln = np.log([p.n_star for p in good])
    a, logk = np.polyfit(lc, ln, 1)
    rec |= {"a": float(a), "b": float(1 - a), "k": math.exp(float(logk))}
    reps = min((p.boot.size for p in good), default=0)
    slopes = []
    for r in range(reps):
        xs = np.array([p.boot[r] for p in good])
        fine = np.isfinite(xs)
        if len(set(lc[fine].tolist())) >= MIN_FRONTIER_PROFILES:
            slopes.append(float(np.polyfit(lc[fine], xs[fine], 1)[0]))
    lo, hi = percentile_ci(slopes, level) if len(slopes) >= 2 else (math.nan, math.nan)
    return rec | {"a_ci_low": lo, "a_ci_high": hi, "b_ci_low": 1 - hi, "b_ci_high": 1 - lo,
                  "error": None}  # fmt: skip


def _final_rows(part: pl.DataFrame) -> pl.DataFrame:
    """One row per trial: its last evaluated step (when the rows carry trial_id and step)."""
    if not {"trial_id", "step"} <= set(part.columns):
        return part
    last = pl.col("step") == pl.col("step").max().over("trial_id")
    return part.filter(last).unique(subset="trial_id", keep="last", maintain_order=True)


def isoflop_tables(
    frame: pl.DataFrame,
    *,
    n: str = "n_params_non_embedding",
    d: str = "tokens_seen",
    y: str = "loss",
    by: tuple[str, ...] = ("task.name", "label", "length_ratio"),
    flops: str | None = None,
    tolerance: float = COMPUTE_TOLERANCE,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """IsoFLOP profiles and frontier exponents per group of ``by`` over the trials of ``frame``
    (one row per trial and group; a trial evaluated at several steps counts at its last).

    C is the column ``flops`` when given, else ``6 * n * d``; the column ``compute_source``
    says which. Returns (profiles: ``by``..., compute_source, the `ProfileFit.as_dict`
    columns; frontier: ``by``..., compute_source, the `fit_frontier` keys).
    """
    needed = [n, d, y, *by] if flops is None else [flops, n, y, *by]
    missing = [c for c in dict.fromkeys(needed) if c not in frame.columns]
    if missing:
        raise ValueError(f"isoflop: no column(s) {missing}; columns are {frame.columns}")
    check_one_scale(frame.filter(pl.col(y).is_not_null()), y, by, "isoflop")
    source = f"column {flops}" if flops else f"6 N D (N = {n}, D = {d})"
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): frame}
    profile_rows: list[dict[str, Any]] = []
    frontier_rows: list[dict[str, Any]] = []
    for key, part in parts.items():
        head = dict(zip(by, key, strict=True)) | {"compute_source": source}
        part = _final_rows(part)
        ns = part.get_column(n).cast(pl.Float64).to_numpy()
        ys = part.get_column(y).cast(pl.Float64).to_numpy()
        if flops:
            cs = part.get_column(flops).cast(pl.Float64).to_numpy()
        else:
            cs = 6.0 * ns * part.get_column(d).cast(pl.Float64).to_numpy()
        ok = np.isfinite(cs) & (cs > 0) & np.isfinite(ns) & np.isfinite(ys)
        if not ok.any():
            frontier_rows.append(head | {"n_profiles": 0, "error": f"no trial with finite {y}, "
                                         "N and compute"})  # fmt: skip
            continue
        ns, ys, cs = ns[ok], ys[ok], cs[ok]
        buckets = compute_buckets(cs, tolerance)
        fits = []
        for c in np.unique(buckets):
            at = buckets == c
            fit = fit_profile(float(c), ns[at], ys[at], n_boot=n_boot, level=level, seed=seed)
            fits.append(fit)
            profile_rows.append(head | fit.as_dict())
        frontier_rows.append(head | fit_frontier(fits, level=level))
    group_schema: dict[str, Any] = {c: frame.schema[c] for c in by}
    group_schema["compute_source"] = pl.String()
    ints = {"n_points", "n_distinct", "n_profiles"}
    prof_schema = group_schema | {
        c: (pl.Int64() if c in ints else pl.String() if c == "error" else pl.Float64())
        for c in _PROFILE_COLUMNS
    }
    front_schema = group_schema | {
        c: (pl.Int64() if c in ints else pl.String() if c == "error" else pl.Float64())
        for c in _FRONTIER_COLUMNS
    }
    return (
        pl.DataFrame([{c: r.get(c) for c in prof_schema} for r in profile_rows],
                     schema=prof_schema, orient="row"),
        pl.DataFrame([{c: r.get(c) for c in front_schema} for r in frontier_rows],
                     schema=front_schema, orient="row"),
    )  # fmt: skip


_PROFILE_COLUMNS: Final = (
    "compute", "n_points", "n_distinct", "n_min", "n_max", "n_star", "n_star_ci_low",
    "n_star_ci_high", "d_star", "d_star_ci_low", "d_star_ci_high", "loss_at_min", "c0", "c1",
    "c2", "error",
)  # fmt: skip
_FRONTIER_COLUMNS: Final = (
    "n_profiles", "a", "a_ci_low", "a_ci_high", "b", "b_ci_low", "b_ci_high", "k", "error",
)  # fmt: skip

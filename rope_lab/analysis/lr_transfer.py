"""Learning rates across widths: the optimal lr per width and how it moves as the model widens.

Per group (task, parametrisation, evaluation length ratio) and width, the loss at each learning
rate is averaged over seeds; the optimum lr* is the vertex of the parabola in ``log lr`` through
the best grid point and its two neighbours (three points: exact interpolation, so the vertex
lies between the neighbours). A width whose best lr is the smallest or largest of its grid is
refused, with the reason: the optimum is not bracketed. A neighbour that diverged (non-finite
loss) brackets the optimum but gives no parabola: lr* is then the best grid point, and the
``fit`` column says so.

Transfer is the slope ``s`` of ``log lr*`` against ``log width`` (least squares over the widths
with an optimum, at least 2): 0 when the best lr stays put (what muP promises), negative when it
falls with width (the standard parametrisation under Adam). Intervals: percentile bootstrap
over seeds, resampling the seeds of the group with replacement (one draw for every width and
lr, since seed s of every configuration shares its data order) and refitting every optimum and
the slope; a replicate with a refused width leaves the slope out of that replicate.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from rope_lab.analysis.curve_labels import trained_expr
from rope_lab.analysis.fits import percentile_ci

__all__ = [
    "LR",
    "WIDTH",
    "LrOptimum",
    "final_trained_rows",
    "fit_lr_optimum",
    "lr_transfer_tables",
    "transfer_slope",
]

LR: Final = "train.lr"
WIDTH: Final = "model.width"
SEED: Final = "train.seed"
GROUP: Final = ("task.name", "model.parametrization", "length_ratio")
MIN_WIDTHS: Final = 2  # a slope needs two widths with an optimum

_Array = np.ndarray[Any, np.dtype[np.float64]]


@dataclasses.dataclass(frozen=True)
class LrOptimum:
    """The optimum of one loss-vs-lr curve: ``lr_star`` (NaN when refused, ``error`` says why),
    ``loss_at_star`` the parabola's value there, ``best_lr`` the best grid point, ``fit``
    how lr* was found (``parabola`` or ``grid point``)."""

    lr_star: float
    loss_at_star: float
    best_lr: float
    fit: str
    error: str | None


def fit_lr_optimum(lrs: Sequence[float], losses: Sequence[float]) -> LrOptimum:
    """The optimal lr of one curve, lrs and losses (m,) (one loss per distinct lr, any order;
    non-finite: diverged): the vertex of the parabola in log lr through the best point and its
    neighbours; refused at the edge of the grid or with fewer than 3 lrs."""
    lr = np.asarray(lrs, dtype=float)
    loss = np.asarray(losses, dtype=float)
    order = np.argsort(lr)
    lr, loss = lr[order], loss[order]
    if lr.size < 3:
        return LrOptimum(math.nan, math.nan, math.nan, "", f"{lr.size} lr(s); a parabola needs 3")
    finite = np.isfinite(loss)
    if not finite.any():
        return LrOptimum(math.nan, math.nan, math.nan, "", "every lr diverged")
    i = int(np.argmin(np.where(finite, loss, np.inf)))
    best = float(lr[i])
    if i in (0, lr.size - 1):
        side = "smallest" if i == 0 else "largest"
        return LrOptimum(
            math.nan,
            math.nan,
            best,
            "",
            f"best lr {best:.3g} is the {side} of "
            f"the grid [{lr[0]:.3g}, {lr[-1]:.3g}]: the optimum is not bracketed",
        )
    if not (finite[i - 1] and finite[i + 1]):
        return LrOptimum(best, float(loss[i]), best, "grid point (a neighbour diverged)", None)
    x = np.log(lr[i - 1 : i + 2])
    c2, c1, c0 = np.polyfit(x, loss[i - 1 : i + 2], 2)
    if c2 <= 0:  # three equal losses: no curvature, the best point stands
        return LrOptimum(best, float(loss[i]), best, "grid point (flat)", None)
    x_star = -c1 / (2 * c2)
    return LrOptimum(
        math.exp(x_star), float(c0 + c1 * x_star + c2 * x_star**2), best, "parabola", None
    )


def transfer_slope(widths: npt.ArrayLike, lr_stars: npt.ArrayLike) -> float:
    """Least-squares slope of log lr* on log width over the finite optima (NaN below 2)."""
    w = np.asarray(widths, dtype=float)
    s = np.asarray(lr_stars, dtype=float)
    ok = np.isfinite(s) & (s > 0)
    if len(set(w[ok].tolist())) < MIN_WIDTHS:
        return math.nan
    return float(np.polyfit(np.log(w[ok]), np.log(s[ok]), 1)[0])


def _cube(part: pl.DataFrame, y: str) -> tuple[_Array, _Array, list[Any], _Array]:
    """(widths (W,), lrs (R,), seeds (S,), losses (S, W, R)) of one group, NaN where a
    configuration has no trial (diverged trials keep their non-finite loss)."""
    widths = np.array(sorted(set(part.get_column(WIDTH).cast(pl.Float64).to_list())))
    lrs = np.array(sorted(set(part.get_column(LR).cast(pl.Float64).to_list())))
    seeds = sorted(set(part.get_column(SEED).to_list()))
    cube = np.full((len(seeds), widths.size, lrs.size), math.nan)
    for row in part.select(SEED, WIDTH, LR, y).iter_rows():
        s, w, r, v = row
        val = math.inf if v is None or not math.isfinite(v) else float(v)
        cube[seeds.index(s), np.searchsorted(widths, w), np.searchsorted(lrs, r)] = val
    return widths, lrs, seeds, cube


def _seed_mean(cube: _Array) -> _Array:
    """(S, W, R) -> (W, R): the mean over seeds that ran (NaN where none did)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmean(cube, axis=0))


def _optima(widths: _Array, lrs: _Array, mean: _Array) -> list[LrOptimum]:
    """One optimum per width of the seed-mean losses (W, R); lrs with no trial are dropped."""
    out = []
    for w in range(widths.size):
        have = ~np.isnan(mean[w])
        out.append(fit_lr_optimum(lrs[have], mean[w][have]))
    return out


def _group_tables(
    part: pl.DataFrame, y: str, n_boot: int, level: float, seed: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    widths, lrs, seeds, cube = _cube(part, y)
    fits = _optima(widths, lrs, _seed_mean(cube))
    boot = np.full((max(n_boot, 0), widths.size), math.nan)
    slopes: list[float] = []
    if len(seeds) >= 2 and n_boot > 0:
        rng = np.random.default_rng(seed)
        for b in range(n_boot):
            drawn = cube[rng.integers(0, len(seeds), size=len(seeds))]
            reps = _optima(widths, lrs, _seed_mean(drawn))
            boot[b] = [f.lr_star for f in reps]
            if np.all(np.isfinite(boot[b])):
                slopes.append(transfer_slope(widths, boot[b]))
    rows = []
    for w, fit in enumerate(fits):
        col = boot[:, w]
        lo, hi = (math.nan, math.nan)
        if fit.error is None and np.isfinite(col).sum() >= 2:
            lo, hi = (math.exp(v) for v in percentile_ci(np.log(col[np.isfinite(col)]), level))
        rows.append(
            {
                "width": float(widths[w]),
                "lr_star": fit.lr_star,
                "lr_star_ci_low": lo,
                "lr_star_ci_high": hi,
                "best_lr": fit.best_lr,
                "loss_at_star": fit.loss_at_star,
                "seeds": len(seeds),
                "fit": fit.fit,
                "error": fit.error,
            }
        )
    stars = [f.lr_star for f in fits]
    accepted = int(np.isfinite(stars).sum())
    slope = transfer_slope(widths, stars)
    lo, hi = percentile_ci(slopes, level) if len(slopes) >= 2 else (math.nan, math.nan)
    error = None
    if math.isnan(slope):
        error = f"{accepted} width(s) with an optimum; the slope needs {MIN_WIDTHS}"
    elif accepted < widths.size:
        error = f"{widths.size - accepted} width(s) refused: slope over the other {accepted}"
    summary = {
        "widths": accepted,
        "slope": slope,
        "slope_ci_low": lo,
        "slope_ci_high": hi,
        "seeds": len(seeds),
        "replicates": len(slopes),
        "error": error,
    }
    return rows, summary


def final_trained_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Whole-sequence rows of each trial as trained (no evaluation-time scaling), last step."""
    if "position_bucket" in frame.columns:
        frame = frame.filter(pl.col("position_bucket").is_null())
    if "method" in frame.columns:
        frame = frame.filter(trained_expr(frame.columns))
    if {"trial_id", "step"} <= set(frame.columns):
        frame = frame.filter(pl.col("step") == pl.col("step").max().over("trial_id"))
    return frame


def lr_transfer_tables(
    frame: pl.DataFrame,
    *,
    y: str = "loss",
    by: tuple[str, ...] = GROUP,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(optima: ``by``..., width, lr_star with its interval, best_lr, loss_at_star, seeds, fit,
    error; slopes: ``by``..., widths, slope with its interval, seeds, replicates, error) of the
    eval rows ``frame`` (one row per trial and length; columns train.lr, model.width,
    train.seed, ``y`` and ``by``). ValueError naming the missing columns."""
    needed = [LR, WIDTH, SEED, y, *by]
    missing = [c for c in dict.fromkeys(needed) if c not in frame.columns]
    if missing:
        raise ValueError(f"lr-transfer: no column(s) {missing}; columns are {frame.columns}")
    frame = final_trained_rows(frame).filter(pl.col(LR).is_not_null() & pl.col(WIDTH).is_not_null())
    optima: list[dict[str, Any]] = []
    slopes: list[dict[str, Any]] = []
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True)
    for key, part in sorted(parts.items(), key=lambda kv: tuple(map(str, kv[0]))):
        head = dict(zip(by, key, strict=True))
        rows, summary = _group_tables(part, y, n_boot, level, seed)
        optima += [head | r for r in rows]
        slopes.append(head | summary)
    group_schema = {c: frame.schema[c] for c in by}
    return (
        pl.DataFrame(optima, schema=group_schema | _OPTIMA, orient="row"),
        pl.DataFrame(slopes, schema=group_schema | _SLOPES, orient="row"),
    )


_F, _I, _S = pl.Float64(), pl.Int64(), pl.String()
_OPTIMA: Final = {
    "width": _F,
    "lr_star": _F,
    "lr_star_ci_low": _F,
    "lr_star_ci_high": _F,
    "best_lr": _F,
    "loss_at_star": _F,
    "seeds": _I,
    "fit": _S,
    "error": _S,
}
_SLOPES: Final = {
    "widths": _I,
    "slope": _F,
    "slope_ci_low": _F,
    "slope_ci_high": _F,
    "seeds": _I,
    "replicates": _I,
    "error": _S,
}

"""Loss laws at every evaluated length ratio r = L_eval / L_train, the extrapolation gap's power
law in N, and a joint law over r checked against the separate laws on held-out scale.

``ratio_law_table`` reads one row per trial and ratio (the eval rows: ``length_ratio``, the
loss, N, D, the seed and the group columns) and returns one row per group and ratio:

- the law ``L(N[, D]) = E + A/N^alpha (+ B/D^beta)`` of that ratio's losses
  (`rope_lab.analysis.loss_law`: ``L(N, D)`` when D takes at least 3 values, ``L(N)`` when it
  takes one; two values are refused), with bootstrap intervals over seeds;
- its held-out check: fitted without the largest N (and the largest D for ``L(N, D)`` when D
  takes more than 3 values, so that 3 remain), the
  relative errors ``predicted / loss - 1`` on the points left out (``heldout_max_rel_error``);
- the same held-out check of the joint law (`rope_lab.analysis.gap_law.fit_joint_law`) fitted to
  every ratio's kept points at once (``joint_heldout_max_rel_error``), and the joint law's
  parameters fitted to all points (``joint_*``, repeated on the group's rows);
- for r != 1, the gap ``G = loss(r) - loss(1x)`` per trial fitted as ``g N^gamma``
  (`rope_lab.analysis.gap_law.fit_gap_law`, a power law in N only even when D varies), with
  ``gap_nonpositive`` counting the gaps <= 0 that refuse it.

A group that cannot be fitted says why in ``error`` (``heldout_error``, ``gap_error``,
``joint_error`` for the parts), never with a silent NaN. ``check_one_scale`` refuses a group
that pools different tasks or different corpora (also in bits per byte).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from rope_lab.analysis.fit_groups import check_one_scale
from rope_lab.analysis.gap_law import JOINT_NAMES, fit_gap_law, fit_joint_law
from rope_lab.analysis.loss_law import MIN_DISTINCT, LossLawFit, fit_loss_law
from rope_lab.analysis.loss_law_table import D_UNITS, held_out_check
from rope_lab.analysis.query import QueryError

__all__ = ["RATIO", "ratio_law_table", "ratio_points", "trial_gaps"]

RATIO = "length_ratio"
# the held-out fit starts from the full fit's optimum and the best few grid points
HELD_OUT_STARTS = 4
_Array = np.ndarray[Any, np.dtype[np.float64]]


def ratio_points(
    frame: pl.DataFrame, *, n: str, d: str, y: str, by: Sequence[str], seed_col: str | None
) -> pl.DataFrame:
    """One row per group, trial and ratio: ``by``..., trial_id, seed, N, D, ratio, ``y``
    (rows with no finite ``y`` dropped). QueryError naming missing columns, or a trial with
    several rows at one ratio in a group (several methods or fine-tunings: group by label)."""
    needed = [*by, "trial_id", n, d, y, RATIO]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise QueryError(f"loss laws by ratio: no column(s) {missing}; columns are {frame.columns}")
    seed = pl.col(seed_col) if seed_col and seed_col in frame.columns else pl.lit(0)
    rows = frame.with_columns(seed.alias("_seed"), pl.col(y).cast(pl.Float64).fill_nan(None))
    rows = rows.filter(pl.col(y).is_not_null() & pl.col(n).is_not_null())
    keys = [*by, "trial_id", "_seed", n, d, RATIO]
    points = rows.group_by(keys, maintain_order=True).agg(pl.col(y).first(), pl.len().alias("k"))
    doubled = points.filter(pl.col("k") > 1)
    if not doubled.is_empty():
        first = doubled.row(0, named=True)
        raise QueryError(
            f"loss laws by ratio: trial {first['trial_id']} has {first['k']} rows at length "
            f"ratio {first[RATIO]:g} in one group ({doubled.height} such trial-ratio pairs: "
            "several methods, factors or fine-tunings); add label to the group columns"
        )
    return points.drop("k").sort(RATIO)


def _d_values(ds: _Array) -> _Array | None:
    """``ds`` when D takes >= 3 values, None when it takes one; ValueError for two."""
    distinct = np.unique(ds[np.isfinite(ds)])
    if distinct.size >= MIN_DISTINCT:
        return ds
    if distinct.size == 2:
        raise ValueError(
            f"D takes 2 distinct values ({', '.join(f'{v:g}' for v in distinct)}): L(N, D) "
            f"needs at least {MIN_DISTINCT}, L(N) one"
        )
    return None


def _held_out_mask(ns: _Array, ds: _Array | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The points at the largest N, or at the largest D when D takes more values than a fit
    needs (``MIN_DISTINCT``: with exactly that many, dropping one would leave too few)."""
    mask = ns == ns.max()
    if ds is not None and np.unique(ds).size > MIN_DISTINCT:
        mask |= ds == ds.max()
    return mask


def _group_rows(
    part: pl.DataFrame, base: dict[str, Any], *, n: str, d: str, y: str, opts: dict[str, Any]
) -> list[dict[str, Any]]:
    """The rows of one group: one per ratio (see the module doc)."""
    ratios = sorted(set(part.get_column(RATIO).to_list()))
    arrays = {
        r: (
            sub.get_column(n).cast(pl.Float64).to_numpy(),
            sub.get_column(d).cast(pl.Float64).to_numpy(),
            sub.get_column(y).to_numpy(),
            sub.get_column("_seed").to_numpy(),
            sub,
        )
        for r in ratios
        for sub in [part.filter(pl.col(RATIO) == r)]
    }
    rows = [{**base, RATIO: r, "n_trials": arrays[r][4].height} for r in ratios]
    try:
        two = _d_values(part.get_column(d).cast(pl.Float64).to_numpy()) is not None
        distinct = part.get_column(n).n_unique()
        if distinct < MIN_DISTINCT:
            raise ValueError(
                f"{distinct} distinct N ({part.height} rows): a loss law needs at least "
                f"{MIN_DISTINCT}"
            )
    except ValueError as e:
        return [{**row, "error": str(e)} for row in rows]
    full: dict[float, LossLawFit] = {}
    kept: dict[float, LossLawFit] = {}
    for row, r in zip(rows, ratios, strict=True):
        ns, ds, ys, seeds, _ = arrays[r]
        dd = ds if two else None
        row["law"] = "L(N, D)" if two else "L(N)"
        try:
            fit = fit_loss_law(
                ns, dd, ys, groups=seeds, n_boot=opts["law_boot"], level=opts["level"],
                seed=opts["seed"], n_starts=opts["n_starts"],
            )  # fmt: skip
        except ValueError as e:
            row["error"] = str(e)
            continue
        full[r] = fit
        row.update({k: v for k, v in fit.as_dict().items() if k not in ("two_variable", "delta")})
        try:
            mask = _held_out_mask(ns, dd)
            check = held_out_check(
                ns, dd, ys, held_out=mask, n_starts=HELD_OUT_STARTS, starts=fit.theta()
            )
            kept[r] = check.fit
            row["heldout_points"] = int(check.held_out.sum())
            row["heldout_max_rel_error"] = check.max_abs_rel_error
        except ValueError as e:
            row["heldout_error"] = f"held-out fit: {e}"
    _gaps(rows, part, n=n, y=y, opts=opts)
    _joint(rows, ratios, arrays, full, kept, two)
    return rows


def trial_gaps(
    part: pl.DataFrame, ratio: float, *, n: str, y: str
) -> tuple[_Array, _Array, npt.NDArray[Any]]:
    """(N, gap, seed), each (k,), of the trials of ``part`` (rows of `ratio_points`) evaluated
    at ``ratio`` and at 1x: gap = ``y`` at ``ratio`` minus ``y`` at 1x of the same trial."""
    one = part.filter(pl.col(RATIO) == 1.0).select("trial_id", pl.col(y).alias("_one"))
    both = part.filter(pl.col(RATIO) == ratio).join(one, on="trial_id", how="inner")
    gap = (both.get_column(y) - both.get_column("_one")).to_numpy()
    return both.get_column(n).cast(pl.Float64).to_numpy(), gap, both.get_column("_seed").to_numpy()


def _gaps(
    rows: list[dict[str, Any]], part: pl.DataFrame, *, n: str, y: str, opts: dict[str, Any]
) -> None:
    """Fill each r != 1 row's gap law (G = loss(r) - loss(1x) per trial, vs N)."""
    has_one = part.filter(pl.col(RATIO) == 1.0).height > 0
    for row in rows:
        if row[RATIO] == 1.0:
            continue
        if not has_one:
            row["gap_error"] = "no rows at length ratio 1: the gap needs the loss at L_train"
            continue
        ns, gap, seeds = trial_gaps(part, row[RATIO], n=n, y=y)
        row["gap_points"], row["gap_nonpositive"] = int(gap.size), int(np.sum(gap <= 0))
        try:
            fit = fit_gap_law(
                ns, gap, groups=seeds, n_boot=opts["n_boot"], level=opts["level"],
                seed=opts["seed"],
            )  # fmt: skip
        except ValueError as e:
            row["gap_error"] = str(e)
            continue
        row.update(gap_g=fit.g, gamma=fit.gamma, gamma_ci_low=fit.gamma_ci[0])
        row.update(gamma_ci_high=fit.gamma_ci[1])


def _joint(
    rows: list[dict[str, Any]],
    ratios: list[float],
    arrays: dict,
    full: dict[float, LossLawFit],
    kept: dict[float, LossLawFit],
    two: bool,
) -> None:
    """Fill the joint law's parameters and its held-out errors per ratio."""
    if len(ratios) < 2 or len(full) < len(ratios):
        reason = "needs at least 2 ratios" if len(ratios) < 2 else "a ratio's own law failed"
        for row in rows:
            row["joint_error"] = f"joint law {reason}"
        return
    ns, ds, ys = (np.concatenate([arrays[r][i] for r in ratios]) for i in range(3))
    rs = np.concatenate([np.full(arrays[r][0].size, r) for r in ratios])
    dd = ds if two else None
    try:
        law = fit_joint_law(ns, dd, rs, ys, full)
    except ValueError as e:
        for row in rows:
            row["joint_error"] = str(e)
        return
    for row in rows:
        row.update(law.as_dict())
    if len(kept) < len(ratios):
        for row in rows:
            row["joint_error"] = "no held-out joint fit: a ratio's held-out fit failed"
        return
    mask = _held_out_mask(ns, dd)
    try:
        held = fit_joint_law(
            ns[~mask], None if dd is None else dd[~mask], rs[~mask], ys[~mask], kept
        )
    except ValueError as e:
        for row in rows:
            row["joint_error"] = f"held-out joint fit: {e}"
        return
    rel = held.predict(ns[mask], None if dd is None else dd[mask], rs[mask]) / ys[mask] - 1.0
    for row, r in zip(rows, ratios, strict=True):
        at = rs[mask] == r
        if at.any():
            row["joint_heldout_max_rel_error"] = float(np.max(np.abs(rel[at])))
        else:
            row["joint_error"] = "no held-out point at this ratio (it lacks the largest N or D)"


LAW_FLOATS = ("E", "A", "alpha", "B", "beta")


def ratio_law_table(
    frame: pl.DataFrame,
    *,
    n: str = "n_params_non_embedding",
    d: str = "tokens_seen",
    y: str = "loss",
    by: Sequence[str] = (),
    seed_col: str | None = "train.seed",
    n_boot: int = 200,
    law_boot: int = 0,
    n_starts: int = 16,
    level: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """Per group of ``by`` and length ratio: the loss law, its held-out error, the joint law's
    held-out error and parameters, and the gap law (module doc). ``frame``: eval rows, one per
    trial and ratio within a group. QueryError for missing columns, a trial with several rows
    at one ratio in a group, or a group that pools tasks or corpora (`check_one_scale`).
    ``n_boot``: bootstrap draws of the gap laws (cheap: a line per draw); ``law_boot``: of
    each ratio's loss law (a refit each, ~10 ms; 0: no intervals); ``n_starts``: L-BFGS starts
    per loss-law fit (`fit_loss_law`)."""
    points = ratio_points(frame, n=n, d=d, y=y, by=by, seed_col=seed_col)
    check_one_scale(frame.filter(pl.col(y).is_not_null()), y, by, "loss laws by ratio")
    opts: dict[str, Any] = {"n_boot": n_boot, "law_boot": law_boot, "n_starts": n_starts}
    opts |= {"level": level, "seed": seed}
    parts = points.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): points}
    rows: list[dict[str, Any]] = []
    for key, part in parts.items():
        base = dict(zip(by, key, strict=True)) | {"loss": y, "d_unit": D_UNITS.get(d, d)}
        rows.extend(_group_rows(part, base, n=n, d=d, y=y, opts=opts))
    floats = [*LAW_FLOATS, *(f"{c}_ci_{s}" for c in LAW_FLOATS for s in ("low", "high"))]
    floats += ["objective", "heldout_max_rel_error", "joint_heldout_max_rel_error"]
    floats += ["gap_g", "gamma", "gamma_ci_low", "gamma_ci_high"]
    floats += [f"joint_{k}" for k in JOINT_NAMES] + ["joint_rms_rel"]
    schema: dict[str, Any] = {c: frame.schema[c] for c in by}
    schema |= {RATIO: pl.Float64(), "law": pl.String(), "loss": pl.String(), "d_unit": pl.String()}
    schema |= {c: pl.Float64() for c in floats}
    ints = ("n_trials", "n", "n_groups", "heldout_points", "gap_points", "gap_nonpositive")
    schema |= {c: pl.Int64() for c in ints}
    schema |= {c: pl.String() for c in ("error", "heldout_error", "gap_error", "joint_error")}
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")

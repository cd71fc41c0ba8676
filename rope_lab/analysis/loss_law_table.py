"""Held-out extrapolation checks of loss-law fits and the per-group table that `rope-lab
loss-law` and the loss-law plot read (the fits themselves: `rope_lab.analysis.loss_law`).

``held_out_check`` fits on all points but those with the largest N (or a given mask) and
returns the relative errors of the predictions at the held-out points; ``loss_law_table`` fits
one law per group of a trials table, with its held-out error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from rope_lab.analysis.fit_groups import check_one_scale
from rope_lab.analysis.loss_law import MIN_DISTINCT, LossLawFit, as_1d, fit_loss_law

__all__ = ["LAW_COLUMNS", "HeldOutCheck", "held_out_check", "loss_law_table"]

_Array = np.ndarray[Any, np.dtype[np.float64]]


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
    starts: npt.ArrayLike | None = None,
) -> HeldOutCheck:
    """Fit the loss law on all points (m,) but the held-out ones and predict those.

    ``held_out``: boolean mask (m,) of the points to hold out; default every point at the
    largest n (the extrapolation in model size). The fit (``fit_loss_law`` with the other
    arguments, no bootstrap by default; ``starts``: further L-BFGS starts) sees only the
    remaining points; returns the held-out
    points, their predictions and relative errors ``predicted / loss - 1``.
    """
    na = as_1d("n", n)
    la = as_1d("loss", loss, na.size)
    da = None if d is None else as_1d("d", d, na.size)
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
        starts=starts,
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
# What D counts, per column it is read from (other columns: their own name).
D_UNITS = {"tokens_seen": "tokens"}


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

    Columns: ``by``..., ``law``, ``loss`` (what L is: the column ``y``, e.g. ``loss`` in nats
    per token or ``bits_per_byte``), ``d_unit`` (what D counts: ``d``'s unit, tokens of the
    trials' task for ``tokens_seen``: bytes for a byte-level model, BPE tokens for a BPE
    corpus), the estimates and ``<name>_ci_low/high`` of E, A, alpha, B, beta (bootstrap over
    ``group_col`` when it varies, else over points), ``objective``, ``n``, ``n_groups``,
    ``heldout_points`` and ``heldout_max_rel_error`` (the fit without the largest N predicting
    it: `held_out_check`; null when too few N remain) and ``error`` (why a group could not be
    fitted; the other values then null)."""
    missing = [c for c in (n, d, y, *by) if c not in frame.columns]
    if missing:
        raise ValueError(f"loss-law fit: no column(s) {missing}; columns are {frame.columns}")
    check_one_scale(frame.filter(pl.col(y).is_not_null()), y, by, "loss-law fit")
    parts = frame.partition_by(list(by), as_dict=True, maintain_order=True) if by else {(): frame}
    rows: list[dict[str, Any]] = []
    for key, part in parts.items():
        rec: dict[str, Any] = dict(zip(by, key, strict=True))
        ns = part.get_column(n).cast(pl.Float64).to_numpy()
        ds = part.get_column(d).cast(pl.Float64).to_numpy()
        ys = part.get_column(y).cast(pl.Float64).to_numpy()
        dd = ds if np.unique(ds[np.isfinite(ds)]).size >= MIN_DISTINCT else None
        groups = None
        if group_col and group_col in part.columns and part.get_column(group_col).n_unique() > 1:
            groups = part.get_column(group_col).to_numpy()
        rec["law"] = "L(N, D)" if dd is not None else "L(N)"
        rec["loss"], rec["d_unit"] = y, D_UNITS.get(d, d)
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
    schema.update({"law": pl.String(), "loss": pl.String(), "d_unit": pl.String()})
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

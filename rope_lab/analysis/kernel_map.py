"""Where the tail kernel vanishes: the vanishing threshold and, per map point (encoding, depth,
width, parametrisation, kernel), the smallest length ratio where a kernel-map metric falls to it
(rows of `rope-lab kernel-map`, `rope_lab.ntk.kernel_map`; numpy and polars only).

The threshold, `VANISHING_COS` = 0.1. Kernel regression moves a long probe's tail by
Theta(F_T(x), X) alpha = cos_T |grad F_T(x)| |grad F(X)| alpha and its in-range part by the same
with cos_H and grad F_H (`rope_lab.ntk.predictions`). Where the per-position gradients of a
region point the same way (|grad F_R| = n_R |grad f|, as at initialisation, where the cosines
between positions are large), the predicted movement per position, tail over in range, is
cos_T / cos_H, so a tail cosine of 0.1 against an in-range cosine of at most 1 predicts at most
10% of the in-range movement at each unseen position: the kernel no longer carries what the
short probes teach to the tail. The same 10% applies to `kernel_tail_collapse_target`, the
measured ratio, which needs no such assumption. Both are far above the cosine of independent
random gradients (`random_feature_cosine`: sqrt(2 / (pi P)) for P parameters, ~0.003 at
100k), so a tail under the threshold is small, not noise.

`vanishing_ratios` gives per point the first measured ratio at or below the threshold (the
metric averaged over seeds), or, when none is, the log-linear trend value = a + b log2(ratio)
fitted over the measured ratios and extrapolated to the threshold (none when b >= 0: the
kernel does not fall with length). Rows of a trained run (`rope-lab kernel-map --from-run`)
carry a `stage`, "init" or "trained", which is part of the point; `stages_side_by_side` puts a
point's two stages on one row.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from numpy.typing import ArrayLike

VANISHING_COS = 0.1
POINT = ("encoding", "depth", "width", "parametrization", "kernel", "stage")
STAGE_COLUMNS = ("at_max_ratio", "slope", "crossed_at", "extrapolated")


def random_feature_cosine(parameters: int) -> float:
    """Mean |cosine| of two independent Gaussian vectors in `parameters` dimensions:
    sqrt(2 / (pi P)) to leading order (the noise floor of a gradient cosine)."""
    return math.sqrt(2.0 / (math.pi * parameters))


def log_linear_trend(ratios: ArrayLike, values: ArrayLike) -> tuple[float, float]:
    """(a, b) of the least-squares fit value = a + b log2(ratio) over (n,) points, n >= 2."""
    x = np.log2(np.asarray(ratios, np.float64))
    y = np.asarray(values, np.float64)
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def crossing(
    ratios: ArrayLike, values: ArrayLike, threshold: float = VANISHING_COS
) -> dict[str, float | None]:
    """The vanishing of one point's metric over its ratios (n,), any order: "crossed_at", the
    smallest ratio whose value is <= threshold (None if none); "slope", b of the log-linear
    trend (per doubling of the ratio); "extrapolated", the ratio where the trend reaches the
    threshold when no measured ratio does (None when b >= 0 or fewer than 2 ratios; inf past
    2^1000)."""
    order = np.argsort(np.asarray(ratios, np.float64))
    r = np.asarray(ratios, np.float64)[order]
    v = np.asarray(values, np.float64)[order]
    below = np.flatnonzero(v <= threshold)
    crossed = float(r[below[0]]) if below.size else None
    slope = extrapolated = None
    if len(r) >= 2:
        a, b = log_linear_trend(r, v)
        slope = b
        if crossed is None and b < 0:
            doublings = (threshold - a) / b
            extrapolated = 2.0**doublings if doublings < 1000 else math.inf  # no float overflow
    return {"crossed_at": crossed, "slope": slope, "extrapolated": extrapolated}


def vanishing_ratios(
    frame: pl.DataFrame, metric: str = "tail_cos_mean", threshold: float = VANISHING_COS
) -> pl.DataFrame:
    """Per point (`POINT` columns present in `frame`) the `crossing` of `metric` averaged over
    seeds at each ratio, with the metric at the smallest and largest ratio; rows without the
    metric are left out."""
    keys = [c for c in POINT if c in frame.columns]
    data = frame.filter(pl.col(metric).is_not_null())
    means = data.group_by([*keys, "ratio"]).agg(pl.col(metric).mean()).sort([*keys, "ratio"])
    out = []
    for key, group in means.group_by(keys, maintain_order=True):
        ratios, values = group["ratio"].to_list(), group[metric].to_list()
        row = dict(zip(keys, key, strict=True)) | {"metric": metric}
        row |= {"at_min_ratio": values[0], "at_max_ratio": values[-1]}
        out.append(row | crossing(ratios, values, threshold))
    schema = {"crossed_at": pl.Float64, "slope": pl.Float64, "extrapolated": pl.Float64}
    return pl.DataFrame(out, schema_overrides=schema) if out else pl.DataFrame()


def vanishing_table(frame: pl.DataFrame) -> pl.DataFrame:
    """`vanishing_ratios` of the tail cosine (every kernel) and, for the NTK, of the
    kernel-predicted tail movement, stacked."""
    parts = [vanishing_ratios(frame, "tail_cos_mean")]
    if "kernel_tail_collapse_target" in frame.columns:
        parts.append(vanishing_ratios(frame, "kernel_tail_collapse_target"))
    return pl.concat([p for p in parts if p.height], how="vertical_relaxed")


def stages_side_by_side(table: pl.DataFrame) -> pl.DataFrame:
    """A `vanishing_table` with a `stage` column as one row per point and metric: the point's
    columns, then `STAGE_COLUMNS` of "init" and of "trained" (prefixed `init_`, `trained_`;
    null where a stage lacks the point, as the NNGP after training)."""
    keys = [c for c in POINT if c in table.columns and c != "stage"] + ["metric"]
    init, trained = (
        table.filter(pl.col("stage") == stage).select(
            *keys, *(pl.col(c).alias(f"{stage}_{c}") for c in STAGE_COLUMNS)
        )
        for stage in ("init", "trained")
    )
    return init.join(trained, on=keys, how="full", coalesce=True, maintain_order="left")


__all__ = [
    "POINT",
    "STAGE_COLUMNS",
    "VANISHING_COS",
    "crossing",
    "log_linear_trend",
    "random_feature_cosine",
    "stages_side_by_side",
    "vanishing_ratios",
    "vanishing_table",
]

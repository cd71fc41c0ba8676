"""IsoFLOP profiles: loss vs parameters per training compute with each profile's parabola in
log N and its minimum, and the compute-optimal frontier N*(C) (`rope_lab.analysis.isoflop`)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.isoflop import COMPUTE_TOLERANCE, compute_buckets, isoflop_tables
from rope_lab.analysis.plots.frames import Source, eval_frame, finite_rows, fit_groups
from rope_lab.analysis.plots.labels import name_of
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.scaling_laws import scaling_data
from rope_lab.analysis.plots.style import styled
from rope_lab.registry import PLOTS


def _ci(low: float | None, high: float | None) -> str:
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f" [{low:.2f}, {high:.2f}]"


def _profiles_panel(ax: Axes, rows: pl.DataFrame, profiles: pl.DataFrame, x: str, y: str) -> None:
    """Points per compute bucket, the accepted profiles' parabolas and minima (with CIs)."""
    cmap = matplotlib.colormaps["viridis"]
    computes = profiles.get_column("compute").to_list()
    ns = rows.get_column(x).cast(pl.Float64).to_numpy()
    ys = rows.get_column(y).cast(pl.Float64).to_numpy()
    cs = rows.get_column("_compute").to_numpy()
    for i, prof in enumerate(profiles.to_dicts()):
        color = cmap(0.85 * i / max(len(computes) - 1, 1))
        at = cs == prof["compute"]
        ax.scatter(ns[at], ys[at], color=color, s=18, zorder=3)
        label = f"C = {prof['compute']:.2g}"
        if prof["error"] is not None:
            ax.plot([], [], color=color, marker="o", linestyle="", label=f"{label}: refused")
            continue
        grid = np.geomspace(prof["n_min"], prof["n_max"], 60)
        lg = np.log(grid)
        ax.plot(grid, prof["c0"] + prof["c1"] * lg + prof["c2"] * lg**2, color=color, lw=1.4)
        lo, hi = prof["n_star_ci_low"], prof["n_star_ci_high"]
        err = None
        if math.isfinite(lo) and math.isfinite(hi):
            err = [[prof["n_star"] - lo], [hi - prof["n_star"]]]
        ax.errorbar([prof["n_star"]], [prof["loss_at_min"]], xerr=err, color=color, marker="*",
                    markersize=11, markeredgecolor="black", zorder=4, label=label)  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel(name_of(x))
    ax.set_ylabel(name_of(y))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, title="compute (FLOPs); ★ minimum, 95% CI", title_fontsize=7)


def _frontier_panel(ax: Axes, profiles: pl.DataFrame, frontier: dict) -> None:
    """N* vs C of the accepted profiles with the fitted N* = k C^a."""
    good = profiles.filter(pl.col("error").is_null())
    if good.is_empty() or frontier.get("error"):
        reason = frontier.get("error") or "no accepted profile"
        ax.text(0.5, 0.5, f"no frontier:\n{reason}", ha="center", va="center", fontsize=8,
                wrap=True, transform=ax.transAxes)  # fmt: skip
        ax.set_xticks([]), ax.set_yticks([])
        return
    c = good.get_column("compute").to_numpy()
    n = good.get_column("n_star").to_numpy()
    lo = good.get_column("n_star_ci_low").to_numpy()
    hi = good.get_column("n_star_ci_high").to_numpy()
    err = np.vstack([n - lo, hi - n]) if np.all(np.isfinite(lo) & np.isfinite(hi)) else None
    ax.errorbar(c, n, yerr=err, marker="*", linestyle="", color="C3", markersize=10)
    grid = np.geomspace(c.min(), c.max(), 40)
    a = frontier["a"]
    ax.plot(grid, frontier["k"] * grid**a, color="C3", lw=1.4,
            label=f"N* ∝ C^a, a = {a:.2f}{_ci(frontier['a_ci_low'], frontier['a_ci_high'])}; "
            f"D* ∝ C^b, b = {frontier['b']:.2f}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("compute-optimal N*")
    ax.legend(fontsize=7)


@PLOTS.register("isoflop")
@styled
def isoflop(
    source: Source,
    *,
    x: str = "n_params_non_embedding",
    length_ratio: float = 1.0,
    metric: str | None = None,
    n_boot: int = 200,
    out: str | Path | None = None,
) -> Figure:
    """IsoFLOP profiles per training compute with their minima, and the frontier N*(C).

    One row of panels per task and label (the PE as trained) at ``length_ratio`` x L_train:
    left, each trial's loss vs ``x`` coloured by its compute bucket (C = 6 N D within 10%), the
    parabola in log N of each profile with at least 3 distinct N and its minimum N* with a
    bootstrap 95% CI over seeds (refused profiles: points only); right, N* vs C with the
    least-squares frontier N* = k C^a (Hoffmann et al. 2022, approach 2). The loss is
    ``metric``: without it bits per byte when every row has one, else nats per token.
    """
    y = q.loss_metric(eval_frame(source)) if metric is None else metric
    rows, where = scaling_data(source, y, length_ratio=length_ratio)
    by = fit_groups(rows)
    q.check_columns(rows, [x, "tokens_seen"], "the plot")
    rows = finite_rows(
        rows.filter(pl.col(x).is_not_null() & pl.col("tokens_seen").is_not_null()), y
    )
    if rows.is_empty():
        raise q.QueryError(f"no trials with a {y}, {x} and tokens_seen")
    rows = rows.with_columns((6.0 * pl.col(x).cast(pl.Float64) * pl.col("tokens_seen")).alias("_c"))
    profiles, frontier = isoflop_tables(rows, n=x, y=y, by=by, n_boot=n_boot)
    groups = frontier.select(by).to_dicts() if by else [{}]
    fig, axes = panel_grid(len(groups), 2, sharex=False, sharey=False, extra=0.8)
    for row_axes, key in zip(axes, groups, strict=True):
        match = [pl.col(c).eq_missing(v) for c, v in key.items()]
        sub = rows.filter(*match) if match else rows
        prof = profiles.filter(*match) if match else profiles
        front = (frontier.filter(*match) if match else frontier).row(0, named=True)
        sub = sub.with_columns(_compute=compute_buckets(sub.get_column("_c").to_numpy()))
        _profiles_panel(row_axes[0], sub, prof, x, y)
        _frontier_panel(row_axes[1], prof, front)
        title = " · ".join(str(v) for v in key.values())
        row_axes[0].set_title(title)
    fig.suptitle(f"IsoFLOP profiles: {name_of(y)} {where} vs {name_of(x)}, C = 6 N D "
                 f"(within {COMPUTE_TOLERANCE:.0%})", fontsize=11)  # fmt: skip
    return finish(fig, out)

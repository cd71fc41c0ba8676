"""Loss laws per length ratio: loss vs non-embedding parameters at each evaluated ratio
r = L_eval / L_train with that ratio's fitted law, one panel per task and label, and the
extrapolation gap's exponent in N (`rope_lab.analysis.ratio_laws`)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.axes import loglog
from rope_lab.analysis.plots.frames import Source, eval_frame, finite_rows, fit_groups
from rope_lab.analysis.plots.labels import name_of
from rope_lab.analysis.plots.layout import finish, panel_grid
from rope_lab.analysis.plots.style import styled
from rope_lab.analysis.ratio_laws import RATIO, ratio_law_table
from rope_lab.registry import PLOTS


def ratio_label(fit: dict) -> str:
    """``4x: α = 0.28, held out 1.2%; gap γ = -0.25 [-0.27, -0.23]`` of one table row."""
    text = f"{fit[RATIO]:g}x"
    if fit["error"] is not None:
        return f"{text}: no law"
    text += f": α = {fit['alpha']:.2f}"
    if fit["heldout_max_rel_error"] is not None:
        text += f", held out {100 * fit['heldout_max_rel_error']:.1f}%"
    if fit["gamma"] is not None:
        lo, hi = fit["gamma_ci_low"], fit["gamma_ci_high"]
        ci = f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
        text += f"; gap γ = {fit['gamma']:.2f}{ci}"
    elif fit["gap_error"] is not None and fit["gap_nonpositive"]:
        text += f"; gap refused ({fit['gap_nonpositive']} <= 0)"
    return text


@PLOTS.register("loss-law-ratios")
@styled
def loss_law_ratios(
    source: Source,
    *,
    x: str = "n_params_non_embedding",
    metric: str | None = None,
    n_boot: int = 200,
    out: str | Path | None = None,
) -> Figure:
    """Loss vs non-embedding parameters per length ratio, with each ratio's fitted law.

    One panel per task and label (the encoding with its scaling or remap method and
    fine-tuning): each trial's loss at every evaluated r x L_train, coloured by r, and the
    law L = E + A / N^alpha (+ B / D^beta at the median token count when D varies) fitted to
    each ratio. The legend gives alpha, the relative error of the law fitted without the
    largest N predicting it, and the gap exponent gamma of G = loss(r) - loss(1x) = g N^gamma
    with its 95% interval over seeds (``n_boot`` draws). ``metric``: bits per byte when every
    row has one, else nats per token.
    """
    frame = eval_frame(source)
    y = q.loss_metric(frame) if metric is None else metric
    by = fit_groups(frame)
    q.check_columns(frame, [x, "tokens_seen", RATIO], "the plot")
    rows = finite_rows(frame.filter(pl.col(x).is_not_null()), y)
    if rows.is_empty():
        raise q.QueryError(f"no eval rows with both a {y} and {x}")
    table = ratio_law_table(rows, n=x, y=y, by=by, n_boot=n_boot)
    groups = table.select(by).unique(maintain_order=True).to_dicts() if by else [{}]
    fig, axes = panel_grid(len(groups), 1, sharex=False, sharey=False, extra=0.8)
    ratios = sorted(set(table.get_column(RATIO).to_list()))
    cmap = matplotlib.colormaps["plasma"]
    colors = {r: cmap(0.85 * i / max(len(ratios) - 1, 1)) for i, r in enumerate(ratios)}
    for (ax,), key in zip(axes, groups, strict=True):
        match = [pl.col(c).eq_missing(v) for c, v in key.items()]
        sub = rows.filter(*match) if match else rows
        fits = table.filter(*match) if match else table
        xs = sub.get_column(x).cast(pl.Float64).to_numpy()
        grid = np.geomspace(xs.min(), xs.max(), 60)
        d_mid = float(np.median(sub.get_column("tokens_seen").cast(pl.Float64).to_numpy()))
        for fit in fits.to_dicts():
            color = colors[fit[RATIO]]
            at = sub.filter(pl.col(RATIO) == fit[RATIO])
            ax.scatter(at.get_column(x).to_numpy(), at.get_column(y).to_numpy(), color=color,
                       s=16, zorder=3)  # fmt: skip
            if fit["error"] is None:
                law = fit["E"] + fit["A"] * grid ** -fit["alpha"]
                if fit["law"] == "L(N, D)":
                    law = law + fit["B"] * d_mid ** -fit["beta"]
                ax.plot(grid, law, color=color, linewidth=1.5)
            ax.plot([], [], color=color, marker="o", label=ratio_label(fit))
        loglog(ax, sub.get_column(x).to_list(), sub.get_column(y).to_list())
        ax.legend(fontsize=7, title="r = L_eval / L_train", title_fontsize=7)
        ax.set_title(" · ".join(str(v) for v in key.values()))
        ax.set_xlabel(name_of(x))
        ax.set_ylabel(name_of(y))
    fig.suptitle(f"Loss laws per length ratio: {name_of(y)} vs {name_of(x)}\n"
                 "L = E + A/N^α (+ B/D^β at the median D); gap G = g N^γ, 95% CI over seeds",
                 fontsize=11)  # fmt: skip
    return finish(fig, out)

"""The loss law: loss vs non-embedding parameters with ``L(N[, D]) = E + A/N^alpha + B/D^beta``
fitted per hue level as Hoffmann et al. (2022) do (`rope_lab.analysis.loss_law`), its exponents with
bootstrap CIs and the error of predicting the largest model from the others."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from rope_lab.analysis import query as q
from rope_lab.analysis.loss_law_table import loss_law_table
from rope_lab.analysis.plots.axes import loglog
from rope_lab.analysis.plots.frames import Source, eval_frame, finite_rows
from rope_lab.analysis.plots.labels import constant_note, format_value, name_of, subtitle
from rope_lab.analysis.plots.layout import facets, finish
from rope_lab.analysis.plots.scaling_laws import scaling_data
from rope_lab.analysis.plots.style import hue_mapping, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS


def _ci(low: float | None, high: float | None) -> str:
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f" [{low:.2f}, {high:.2f}]"


def law_label(fit: dict) -> str:
    """``alpha = 0.31 [0.25, 0.38]`` (and beta for L(N, D)), plus the held-out error, of one
    row of `loss_law_table`."""
    text = f"α = {fit['alpha']:.2f}{_ci(fit['alpha_ci_low'], fit['alpha_ci_high'])}"
    if fit["law"] == "L(N, D)":
        text += f", β = {fit['beta']:.2f}{_ci(fit['beta_ci_low'], fit['beta_ci_high'])}"
    text += f", E = {fit['E']:.2f}"
    if fit.get("heldout_max_rel_error") is not None:
        text += f"; largest N predicted within {100 * fit['heldout_max_rel_error']:.1f}%"
    return text


@PLOTS.register("loss-law")
@styled
def loss_law(
    source: Source,
    *,
    x: str = "n_params_non_embedding",
    hue: str | None = "model.position.kind",
    col: str | None = None,
    length_ratio: float = 1.0,
    metric: str | None = None,
    n_boot: int = 200,
    out: str | Path | None = None,
) -> Figure:
    """Loss vs non-embedding parameters with the fitted loss law per hue level.

    Points: each trial's loss at ``length_ratio`` x L_train (the PE as trained); curves: the
    fit of ``L(N) = E + A / N^alpha`` (``L(N, D)`` with ``+ B / D^beta`` when the trials see at
    least 3 token counts D, in tokens of the task, one curve per token count) by Huber loss on
    log residuals with multi-start L-BFGS, the exponents' bootstrap 95% CIs (over seeds when
    there are several) and the held-out error of the largest N in the legend. The loss is
    ``metric``: without it bits per byte when every row has one (text language models), else
    nats per token (`query.loss_metric`).
    """
    y = q.loss_metric(eval_frame(source)) if metric is None else metric
    rows, where = scaling_data(source, y, length_ratio=length_ratio)
    if col is None and "task.name" in rows.columns and rows.get_column("task.name").n_unique() > 1:
        col = "task.name"  # losses of different tasks are never fitted together
    q.check_columns(rows, [x, "tokens_seen", *(c for c in (hue, col) if c)], "the plot")
    rows = finite_rows(rows.filter(pl.col(x).is_not_null()), y)
    if rows.is_empty():
        raise QueryError(
            f"no trials with both a loss and {x} (runs written before {x} was recorded: "
            "--x n_params)"
        )
    _, palette = hue_mapping(rows, hue) if hue else ([], {})
    fig, items = facets(rows, col, None, sharey=False, extra=0.6)
    fig.set_size_inches(fig.get_figwidth() * 1.3, fig.get_figheight() * 1.35)
    for ax, sub, title in items:
        table = loss_law_table(sub, n=x, y=y, by=(hue,) if hue else (), n_boot=n_boot)
        for fit in table.to_dicts():
            level = fit.get(hue) if hue else None
            color = palette.get(level, "C0") if hue else "C0"
            pts = sub if hue is None else sub.filter(pl.col(hue) == level)
            xs = pts.get_column(x).cast(pl.Float64).to_numpy()
            ax.scatter(xs, pts.get_column(y).to_numpy(), color=color, s=20, zorder=3)
            name = format_value(level) if hue else "data"
            if fit["error"] is not None:
                ax.plot([], [], color=color, marker="o", label=f"{name} (no fit)")
                continue
            grid = np.geomspace(xs.min(), xs.max(), 60)
            tokens = sorted(set(pts.get_column("tokens_seen").to_list()))
            for i, d in enumerate(tokens if fit["law"] == "L(N, D)" else [None]):
                law = fit["E"] + fit["A"] * grid ** -fit["alpha"]
                if d is not None:
                    law = law + fit["B"] * float(d) ** -fit["beta"]
                alpha = 1.0 if d is None else 0.4 + 0.6 * (i + 1) / len(tokens)
                ax.plot(grid, law, color=color, linewidth=1.6, alpha=alpha)
            ax.plot([], [], color=color, marker="o", label=f"{name}: {law_label(fit)}")
        loglog(ax, sub.get_column(x).to_list(), sub.get_column(y).to_list())
        ax.legend(
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            title="L = E + A/N^α (+ B/D^β, D in tokens), 95% CI; lighter curves: fewer D",
            title_fontsize=7,
        )
        ax.set_title(title)
        ax.set_xlabel(name_of(x))
        ax.set_ylabel(name_of(y))
    fig.suptitle(
        f"Loss law: {name_of(y)} {where} vs {name_of(x)}\n"
        + subtitle(
            constant_note(rows, ["task.name", "train.length"]),
            f"{rows.height} trials; Hoffmann et al. approach 3",
        ),
        fontsize=11,
    )
    return finish(fig, out)

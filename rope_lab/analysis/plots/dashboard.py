"""``summary``: one page for a whole sweep, from the panels of the other plot kinds (each task's
metric vs length, loss by position, longest length kept, loss vs width, training loss, and the
NTK drift and cross-kernel panels when ntk rows exist). Tasks are never pooled in one curve."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import seaborn as sns
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.axes import lineplot, log2_axis, mark_train_length, plain_log
from rope_lab.analysis.plots.curves import with_labels
from rope_lab.analysis.plots.eval_curves import bucket_frame, draw_extrapolation, draw_positions
from rope_lab.analysis.plots.frames import eval_frame, finite_rows, n_seeds, ntk_frame
from rope_lab.analysis.plots.labels import (
    constant_note,
    format_value,
    name_of,
    spread_note,
    subtitle,
)
from rope_lab.analysis.plots.layout import finish
from rope_lab.analysis.plots.ntk import cross_rows, draw_drift_end
from rope_lab.analysis.plots.scaling_laws import draw_scaling, scaling_data
from rope_lab.analysis.plots.style import DASHES, dashed_labels, figure_legend, hue_mapping, styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS


@PLOTS.register("summary")
@styled
def summary(source: q.Source, *, threshold: float = 0.9, out: str | Path | None = None) -> Figure:
    """One-page dashboard.

    One page for a whole sweep: accuracy and loss vs length of a single task, or each task's
    metric vs length in its own panel (widest model), loss by position and loss vs width of one
    task (a language-model task when there is one), how far each curve keeps its L_train
    quality in its task's metric (`query.task_metrics`: for language-model tasks bits per byte
    where the rows have them, else loss, at most the L_train value / ``threshold``; accuracy,
    at least ``threshold`` x L_train accuracy, otherwise); a language model's loss panels read
    bits per byte where its rows have them; the training loss curves (of that task, nats per
    token), the NTK drift and
    cross-kernel panels when ntk rows exist, and the verdicts of the published claims
    (`rope-lab claims`) that the runs can decide.
    """
    res = source if isinstance(source, q.Results) else q.results_of(source)
    evals = eval_frame(res)
    buckets = eval_frame(res, whole_sequence=False)
    ntk = q.ntk_table(res)
    has_ntk = not ntk.is_empty()
    rows_of_panels = 3 if has_ntk else 2
    verdicts = claim_lines(res)
    claims_inches = 0.7 + 0.16 * min(len(verdicts[1]), CLAIM_LINES)
    fig = Figure(figsize=(19, 4.0 * rows_of_panels + 2.5 + claims_inches), layout="constrained")
    gs = GridSpec(
        rows_of_panels + 1,
        3,
        figure=fig,
        height_ratios=[*([1.0] * rows_of_panels), claims_inches / 4.0],
    )
    widths = (
        sorted(evals.get_column("model.width").unique().drop_nulls().to_list())
        if ("model.width" in evals.columns)
        else []
    )
    widest = evals.filter(pl.col("model.width") == widths[-1]) if widths else evals
    wtitle = f" (width {widths[-1]})" if widths else ""
    order, palette = hue_mapping(evals, "label")

    metrics = q.task_metrics(evals)
    for ax, (task, metric) in zip(
        _length_axes(fig, gs, len(metrics)), _length_panels(metrics), strict=True
    ):
        rows = _of_task(widest, task)
        draw_extrapolation(
            ax, rows, metric=metric, x="length", hue="label", order=order, palette=palette
        )
        where = "" if task is None or len(metrics) == 1 else f" · {task}"
        ax.set(
            title=f"{metric} vs length{where}{wtitle}",
            xlabel=name_of("length"),
            ylabel=name_of(metric),
        )

    ax = fig.add_subplot(gs[0, 2])
    parts = [
        q.extrapolation_summary(
            evals if task is None else evals.filter(pl.col("task.name") == task),
            threshold=threshold,
            metric=metric,
        )
        for task, metric in metrics.items()
    ]
    summ = pl.concat(parts, how="diagonal_relaxed")
    _draw_longest(ax, summ, order, palette, threshold, sorted(set(metrics.values())))

    # one task for the loss-by-position and loss-vs-width panels (a language-model task when
    # there is one): losses of different tasks are not on one scale; read in bits per byte
    # where the task's rows have them (`query.loss_metric`), else in nats per token
    focus = next((t for t, m in metrics.items() if m in q.LM_METRICS), next(iter(metrics)))
    focus_note = "" if len(metrics) == 1 or focus is None else f" · {focus}"
    buckets = _of_task(buckets, focus)
    lm = q.loss_metric(buckets.filter(pl.col("position_bucket").is_not_null()))
    ax = fig.add_subplot(gs[1, 0])
    pos = bucket_frame(buckets, lm, "longest")
    pos_w = finite_rows(pos.filter(pl.col("model.width") == widths[-1]) if widths else pos, lm)
    if not pos_w.is_empty():
        draw_positions(ax, pos_w, metric=lm, hue="label", order=order, palette=palette)
    ax.set(
        title=f"{lm} by position at the longest length{focus_note}{wtitle}",
        xlabel="position (bucket centre, tokens)",
        ylabel=name_of(lm),
    )

    ax = fig.add_subplot(gs[1, 1])
    if len(widths) >= 1 and "model.position.kind" in evals.columns:
        focused = _of_task(evals, focus)
        lm = q.loss_metric(focused)
        rows, where = scaling_data(focused, lm)
        rows = rows.rename({lm: "_y"})
        k_order, k_pal = hue_mapping(rows, "model.position.kind")
        draw_scaling(
            ax,
            rows,
            x="model.width",
            hue="model.position.kind",
            order=k_order,
            palette=k_pal,
            offset=False,
            n_boot=200,
        )
        ax.set(
            title=f"{lm} {where} vs width{focus_note}",
            xlabel=name_of("model.width"),
            ylabel=name_of(lm),
        )

    ax = fig.add_subplot(gs[1, 2])
    train = res.with_config("train").collect()
    if "task.name" in train.columns:
        train = _of_task(train, focus)
    if not train.is_empty():
        train = with_labels(train, as_trained="none")
        t_order, t_pal = hue_mapping(train, "label")
        style = "model.width" if len(widths) > 1 else None
        lineplot(
            ax,
            train,
            "step",
            "loss",
            "label",
            t_order,
            t_pal,
            style=style,
            style_order=widths if style else None,
            marker=None,
        )
        plain_log(ax, "y")
        ax.set(
            title="training loss" + focus_note + (" (dash = width)" if style else ""),
            xlabel="training step",
            ylabel=name_of("loss"),
        )
        for i, w in enumerate(widths if style else []):
            dash = DASHES[i % len(DASHES)]
            (line,) = ax.plot([], [], color="0.3", label=f"width {w}")
            if dash:
                line.set_dashes(dash)
        if style:
            ax.legend(fontsize=8, loc="upper right")

    if has_ntk:
        _ntk_dashboard_row(fig, gs, ntk_frame(ntk))
    _claims_panel(fig.add_subplot(gs[rows_of_panels, :]), *verdicts)
    seeds = n_seeds(evals, ["length", "label", "model.width"])
    fig.suptitle(
        f"Sweep summary: {', '.join(str(p) for p in res.run_dirs)}\n"
        + subtitle(
            f"{evals.get_column('trial_id').n_unique()} trials",
            constant_note(evals, ["task.name", "train.length"]),
            spread_note(seeds),
        ),
        fontsize=12,
    )
    figure_legend(fig, order, palette, name_of("label"), dashed=dashed_labels(evals, "label"))
    return finish(fig, out)


def _of_task(frame: pl.DataFrame, task: str | None) -> pl.DataFrame:
    """The rows of one task (all rows for None: a frame without tasks)."""
    return frame if task is None else frame.filter(pl.col("task.name") == task)


def _length_panels(metrics: Mapping[str | None, str]) -> list[tuple[str | None, str]]:
    """(task, metric) of the metric-vs-length panels: accuracy and loss of a single task (its
    bits per byte for a language model whose rows have them), else each task's own metric
    (tasks are never pooled: their losses are not on one scale)."""
    if len(metrics) == 1:
        ((task, metric),) = metrics.items()
        return [(task, "accuracy"), (task, metric if metric in q.LM_METRICS else "loss")]
    return list(metrics.items())


def _length_axes(fig: Figure, gs: GridSpec, n_tasks: int) -> list[Axes]:
    """Axes of the metric-vs-length panels, side by side in the first two slots of row 0."""
    count = 2 if n_tasks == 1 else n_tasks
    inner = gs[0, 0:2].subgridspec(1, count)
    return [fig.add_subplot(inner[0, i]) for i in range(count)]


def _draw_longest(
    ax: Axes,
    summ: pl.DataFrame,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
    threshold: float,
    metrics: Sequence[str] = ("accuracy",),
) -> None:
    """Horizontal bars: longest length keeping the threshold of each task's metric, per label
    (and width)."""
    data = summ.filter(pl.col("longest_ratio").is_not_null())
    if data.is_empty():
        ax.text(0.5, 0.5, "no summary (no L_train rows)", ha="center", transform=ax.transAxes)
        return
    hue = (
        "model.width"
        if "model.width" in data.columns and q.varying_columns(data, ["model.width"])
        else None
    )
    pdf = data.select("label", "longest_ratio", *([hue] if hue else [])).to_pandas()
    present = [v for v in order if v in set(pdf["label"])]
    kw: dict[str, Any] = {}
    if hue:
        w_order, w_pal = hue_mapping(data, hue)
        kw = {"hue": hue, "hue_order": w_order, "palette": w_pal}
    else:
        kw = {"hue": "label", "hue_order": present, "palette": palette, "legend": False}
    sns.barplot(
        data=pdf,
        y="label",
        x="longest_ratio",
        order=present,
        errorbar=("se", 1),
        ax=ax,
        orient="h",
        **kw,
    )
    ax.set_xscale("log", base=2)
    ratios = sorted(set(pdf["longest_ratio"]))
    ax.xaxis.set_major_locator(ticker.FixedLocator(ratios))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlim(min(ratios) / 1.5, max(ratios) * 1.3)
    ax.set(
        title=f"longest length keeping {_kept(metrics, threshold)}",
        xlabel="longest length / L_train",
        ylabel="",
    )
    legend = ax.get_legend()
    if hue and legend is not None:
        legend.set_title("width")


def _kept(metrics: Sequence[str], threshold: float) -> str:
    """'≥ 90% of L_train accuracy', 'loss ≤ L_train loss / 0.9' or both (the panel title)."""
    parts = [
        f"{m} ≤ L_train {m} / {threshold:g}"
        if m in q.LOWER_IS_BETTER
        else f"≥ {threshold:.0%} of L_train {m}"
        for m in metrics
    ]
    return " / ".join(parts)


CLAIM_LINES = 16  # per column of the claims panel


def claim_lines(res: q.Results) -> tuple[str, list[str]]:
    """The counts of every verdict of `rope-lab claims` on ``res``, and one line per decided
    verdict (holds / fails: claim, scope, effect and its interval)."""
    from rope_lab.analysis.claims import VERDICTS, judge

    verdicts = judge(res)
    counts = ", ".join(f"{sum(v.verdict == k for v in verdicts)} {k}" for k in VERDICTS)
    lines = [
        f"{v.verdict:<5}  {v.claim} ({v.scope}): effect {v.effect:.3g}"
        + (f" [{v.ci_low:.3g}, {v.ci_high:.3g}]" if v.ci_low is not None else "")
        for v in verdicts
        if v.verdict != "inconclusive" and v.effect is not None
    ]
    return counts, lines


def _claims_panel(ax: Axes, counts: str, lines: list[str]) -> None:
    """The decided verdicts in two text columns under the counts of all verdicts; the
    inconclusive ones are left to the command."""
    ax.axis("off")
    shown = lines[: 2 * CLAIM_LINES]
    more = len(lines) - len(shown)
    ax.set_title(
        f"published claims on these runs: {counts}"
        + (f" ({more} more decided)" if more else "")
        + "; `rope-lab claims RUN_DIR` lists all with their reasons",
        fontsize=10,
        loc="left",
    )
    for col in range(2):
        chunk = shown[col * CLAIM_LINES : (col + 1) * CLAIM_LINES]
        ax.text(
            0.5 * col,
            1.0,
            "\n".join(chunk),
            va="top",
            ha="left",
            family="monospace",
            fontsize=7.5,
            transform=ax.transAxes,
        )


def _ntk_dashboard_row(fig: Figure, gs: GridSpec, ntk: pl.DataFrame) -> None:
    """Third row: NTK drift vs step, end-of-training drift vs width, cross / train cosine."""
    metrics = set(ntk.get_column("metric").unique().to_list())
    ax = fig.add_subplot(gs[2, 0])
    if "distance_from_init" in metrics:
        rows = q.ntk_final(ntk, "distance_from_init", step="all").filter(pl.col("step") > 0)
        order, palette = hue_mapping(rows, "model.width")
        kinds = sorted(rows.get_column("model.position.kind").unique().to_list())
        lineplot(
            ax,
            rows,
            "step",
            "value",
            "model.width",
            order,
            palette,
            style="model.position.kind" if len(kinds) > 1 else None,
            style_order=kinds,
            marker=None,
        )
        plain_log(ax, "x")
        for w in order:
            ax.plot([], [], color=palette[w], label=f"width {format_value(w)}")
        for i, kind in enumerate(kinds if len(kinds) > 1 else []):
            (line,) = ax.plot([], [], color="0.3", label=kind)
            dash = DASHES[i % len(DASHES)]
            if dash:
                line.set_dashes(dash)
        ax.legend(fontsize=8, loc="best")
        ax.set(
            title="NTK distance from init (dash = PE kind)",
            xlabel="training step",
            ylabel=name_of("distance_from_init"),
        )
        ax = fig.add_subplot(gs[2, 1])
        final = q.ntk_final(ntk, "distance_from_init")
        draw_drift_end(ax, final, x="model.width", by="model.position.kind", n_boot=200)
        ax.set(
            title="end-of-training drift vs width",
            xlabel=name_of("model.width"),
            ylabel=name_of("distance_from_init"),
        )
    ax = fig.add_subplot(gs[2, 2])
    try:
        rows = cross_rows(ntk, "cross_train_cos_ratio", "total")
    except QueryError:
        ax.text(0.5, 0.5, "no cross-kernel rows", ha="center", transform=ax.transAxes)
        return
    order, palette = hue_mapping(rows, "label")
    lineplot(ax, rows, "probe_length", "value", "label", order, palette)
    log2_axis(ax, rows.get_column("probe_length").to_list())
    if "train.length" in rows.columns:
        mark_train_length(ax, rows.get_column("train.length").unique().to_list())
    ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1)
    ax.set(
        title="cross / train kernel cosine (end of training)",
        xlabel=name_of("probe_length"),
        ylabel=name_of("cross_train_cos_ratio"),
    )

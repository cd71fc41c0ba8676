"""Write the reproduction report of a run of `sweeps/reproduce_cpu.yaml` (or any run).

Usage::

    python analysis/reproduce.py runs/reproduce_cpu --out docs --discussion docs/discussion.md

Writes ``OUT/reproduction.md`` and its figures under ``OUT/reproduction/``: what was run (from
the trials table), the verdict table of every registered claim (``rope-lab claims``), the
extrapolation curves (loss for language-model tasks, accuracy otherwise), the tail-kernel
cosine through training, the kernel's relative change against width with its log-log fit, and
the discussion: one line per measured claim that failed or stayed inconclusive, with its
reason, then the text of ``--discussion`` (what a person concluded from the numbers) when given.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import polars as pl

from rope_lab.analysis import query as q
from rope_lab.analysis.claims import Evidence, evidence, format_verdicts, judge
from rope_lab.analysis.fits import drift_slope

FIGURES = "reproduction"


def _values(frame: pl.DataFrame, col: str) -> str:
    if col not in frame.columns:
        return "–"
    return ", ".join(str(v) for v in sorted(frame.get_column(col).unique().drop_nulls().to_list()))


def setup_lines(res: q.Results) -> list[str]:
    """What was run, read from the trials table (counts, tasks, encodings, seeds, time)."""
    trials = res.trials.collect()
    status = ", ".join(
        f"{s} {n}" for s, n in trials.group_by("status").len().sort("status").iter_rows()
    )
    wall = trials.get_column("wall_time_s").sum() if "wall_time_s" in trials.columns else None
    lines = [
        "## Setup",
        "",
        f"- trials: {trials.height} ({status}); tasks: {_values(trials, 'task.name')}",
        f"- encodings: {_values(trials, 'model.position.kind')}; widths: "
        f"{_values(trials, 'model.width')}; depth: {_values(trials, 'model.depth')}; "
        f"parametrisations: {_values(trials, 'model.parametrization')}",
        f"- L_train: {_values(trials, 'train.length')}; steps: {_values(trials, 'train.steps')}; "
        f"batch: {_values(trials, 'train.batch_size')}; seeds: {_values(trials, 'train.seed')}",
    ]
    if wall is not None:
        lines.append(f"- summed trial wall time: {wall / 60:.1f} min (trials run 2 at a time)")
    return [*lines, ""]


def tail_cosine_figure(ev: Evidence, out: Path) -> Path | None:
    """tail_cos_mean (positions >= L_train of the longest probes vs the training probes)
    against training step, one line per variant (mean over seeds), one panel per task."""
    import seaborn as sns
    from matplotlib.figure import Figure

    if ev.ntk.is_empty():
        return None
    rows = ev.ntk.filter(
        (pl.col("metric") == "tail_cos_mean") & (pl.col("group") == "total") & pl.col("trained")
    )
    if "model.parametrization" in rows.columns:
        rows = rows.filter(pl.col("model.parametrization") != "ntk")
    if rows.is_empty():
        return None
    rows = rows.filter(pl.col("probe_length") == pl.col("probe_length").max().over("trial_id"))
    tasks = sorted(rows.get_column("task").unique().to_list())
    fig = Figure(figsize=(6 * len(tasks), 4.2), layout="constrained")
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        sub = rows.filter(pl.col("task") == task).with_columns(pl.col("step").clip(lower_bound=1))
        sns.lineplot(
            sub.to_pandas(), x="step", y="value", hue="variant", ax=ax, marker="o", errorbar="se"
        )
        ax.set_xscale("log", base=2)
        ax.set_title(f"{task}: tail-kernel cosine at the longest probe (step 0 shown at 1)")
        ax.set_ylabel("tail_cos_mean")
    path = out / "tail_cosine.png"
    fig.savefig(path, dpi=110)
    return path


def drift_figure(res: q.Results, out: Path) -> tuple[Path | None, list[str]]:
    """Last-step relative change of the train kernel against width (NTK-parametrised trials),
    log-log, with the fitted slope and its bootstrap interval over seeds."""
    import seaborn as sns
    from matplotlib.figure import Figure

    ntk = q.ntk_table(res)
    if ntk.is_empty() or "model.parametrization" not in ntk.columns:
        return None, []
    ntk = ntk.filter(pl.col("model.parametrization") == "ntk")
    if ntk.is_empty():
        return None, []
    last = q.ntk_final(ntk, "relative_change")
    if last.get_column("model.width").n_unique() < 2:
        return None, []
    fit = drift_slope(ntk, metric="relative_change")
    fig = Figure(figsize=(5.5, 4.2), layout="constrained")
    ax = fig.subplots()
    sns.scatterplot(last.to_pandas(), x="model.width", y="value", hue="train.seed", ax=ax)
    widths = sorted(last.get_column("model.width").unique().to_list())
    ax.plot(widths, fit.fit.predict(widths), color="k", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylabel("relative change of K_train from init (last step)")
    ax.set_title(f"slope {fit.slope:.2f}, 95% CI [{fit.ci[0]:.2f}, {fit.ci[1]:.2f}]")
    path = out / "drift_vs_width.png"
    fig.savefig(path, dpi=110)
    note = [
        f"Log-log slope of the relative change against width: {fit.slope:.3f} (95% bootstrap "
        f"interval over seeds [{fit.ci[0]:.3f}, {fit.ci[1]:.3f}], {fit.n} trials, r2 "
        f"{fit.r2:.2f}); the NTK-regime expectation is between -1 and -0.5.",
        "",
    ]
    return path, note


def write(run_dirs: list[Path], out: Path, discussion: Path | None) -> Path:
    """Write ``out/reproduction.md`` and its figures; returns the markdown path."""
    command = " ".join(map(str, run_dirs)) + f" --out {out}"
    command += f" --discussion {discussion}" if discussion is not None else ""
    from rope_lab.analysis.plots import plot_function

    res = q.results_of(run_dirs)
    figdir = out / FIGURES
    figdir.mkdir(parents=True, exist_ok=True)
    ev = evidence(res)  # loaded once for the verdicts and the tail-kernel figure
    verdicts = judge(ev)
    measured = [v for v in verdicts if v.effect is not None]
    unmeasured = sorted({v.claim for v in verdicts} - {v.claim for v in measured})
    lines = [
        "# Reproduction at CPU scale",
        "",
        f"Generated by `python analysis/reproduce.py {command}` on "
        f"{datetime.date.today().isoformat()}; every number below is read from that run.",
        "",
        *setup_lines(res),
        "## Verdicts",
        "",
        "Each claim is judged by `rope-lab claims` (`rope_lab/analysis/claims/`): the effect is "
        "computed "
        "on the seed means, its 95% interval by resampling seeds, and the claim holds when the "
        "interval lies wholly beyond the threshold.",
        "",
        format_verdicts(measured, "md"),
        "",
        "Not measured by this run (it lacks the encodings, stages or seeds they need; `rope-lab "
        "claims` says what each needs): " + (", ".join(unmeasured) or "none") + ".",
        "",
        "## Figures",
        "",
    ]
    curves = figdir / "extrapolation.png"
    evals = q.eval_table(res)
    if "model.parametrization" in evals.columns:  # the width series goes to the drift figure
        evals = evals.filter(pl.col("model.parametrization") != "ntk")
    plot_function("extrapolation")(evals, out=curves)
    lines += [f"![extrapolation curves]({FIGURES}/{curves.name})", ""]
    tail = tail_cosine_figure(ev, figdir)
    if tail is not None:
        lines += [f"![tail-kernel cosine through training]({FIGURES}/{tail.name})", ""]
    drift, note = drift_figure(res, figdir)
    if drift is not None:
        lines += [f"![kernel drift against width]({FIGURES}/{drift.name})", "", *note]
    lines += ["## Discussion", ""]
    open_claims = [v for v in measured if v.verdict != "holds"]
    lines += [
        f"- **{v.claim}** ({v.scope}): {v.verdict}"
        + (f" (effect {v.effect:.3g})" if v.effect is not None else "")
        + (f": {v.reason}" if v.reason else "")
        for v in open_claims
    ]
    if discussion is not None:
        lines += ["", discussion.read_text().strip()]
    path = out / "reproduction.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: RUN_DIR... [--out DIR] [--discussion FILE]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--discussion", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        path = write(args.run_dirs, args.out, args.discussion)
    except (q.QueryError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

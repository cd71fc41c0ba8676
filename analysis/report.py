"""Turn run directories into the figures and tables of a short write-up.

Usage::

    python analysis/report.py runs/smoke [runs/other ...] --out reports/smoke
    python analysis/report.py runs/smoke --out reports/smoke --formats png,pdf --threshold 0.9

Writes into ``--out``:

- ``report.md``: what was run (trials, PE kinds, widths, seeds, L_train), then tables (means
  over seeds): the longest length keeping >= threshold x the L_train accuracy, accuracy by
  evaluation length, loss ratios at k x L_train, power-law fits of loss vs width per PE kind,
  NTK drift slopes (when the runs have NTK rows), the verdicts of the published claims
  (`rope-lab claims`), and links to the figures;
- ``extrapolation_summary.csv``: one row per trial x (method, factor, fine-tuning steps);
- figures (one file per format): ``extrapolation`` (accuracy vs length), ``extrapolation_loss``,
  ``positions``, ``scaling``, ``summary``, and ``ntk-drift`` / ``ntk-cross`` with NTK rows.

``--no-figures`` writes the tables only. Exit code 1 (one ``error:`` line) when the run
directories cannot be read.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rope_lab.analysis import query as q
from rope_lab.analysis.fits import fits_table


def to_markdown(frame: pl.DataFrame, *, float_fmt: str = ".3g") -> str:
    """A GitHub-flavoured markdown table of ``frame`` (nulls as ``–``)."""

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return "–"
        if isinstance(v, float):
            return format(v, float_fmt)
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([head, rule, *body])


def _values(frame: pl.DataFrame, col: str) -> str:
    if col not in frame.columns:
        return "–"
    vals = sorted(frame.get_column(col).unique().drop_nulls().to_list())
    return ", ".join(str(v) for v in vals) or "–"


def _pivot(frame: pl.DataFrame, on: str, index: list[str], values: str) -> pl.DataFrame:
    out = frame.sort(on, maintain_order=True).pivot(
        on=on, index=index, values=values, aggregate_function="first"
    )
    return out.rename({c: f"{on.split('.')[-1]} {c}" for c in out.columns if c not in index})


def _label_order(frame: pl.DataFrame, *, by_width: bool = True) -> pl.DataFrame:
    """Rows by width, then PE kinds before RoPE scalings (as in the figures' legends)."""
    from rope_lab.analysis.plots import label_key

    keys = {v: i for i, v in enumerate(sorted(set(frame["label"]), key=label_key))}
    by = ["model.width", "_o"] if by_width and "model.width" in frame.columns else ["_o"]
    ranked = frame.with_columns(pl.col("label").replace_strict(keys).alias("_o"))
    return ranked.sort(by).drop("_o")


def tables(res: q.Results, threshold: float) -> tuple[list[str], pl.DataFrame]:
    """Markdown sections of the report and the extrapolation summary."""
    evals = q.eval_table(res)
    trials = res.trials.collect()
    summ = q.extrapolation_summary(evals, threshold=threshold)
    status = trials.group_by("status").len().sort("status")
    lines = [
        "## What was run",
        "",
        f"- run directories: {', '.join(str(p) for p in res.run_dirs)}",
        f"- trials: {trials.height} (" + ", ".join(f"{s} {n}" for s, n in status.iter_rows()) + ")",
        f"- task: {_values(trials, 'task.name')}; L_train: {_values(trials, 'train.length')}",
        f"- PE kinds: {_values(trials, 'model.position.kind')}; widths: "
        f"{_values(trials, 'model.width')}; seeds: {_values(trials, 'train.seed')}",
        f"- evaluation lengths: {_values(evals, 'length')}; RoPE scalings: "
        f"{_values(evals.filter(pl.col('label').str.contains('/')), 'label')}",
        "",
    ]
    width = ["model.width"] if "model.width" in evals.columns else []
    longest = q.aggregate_seeds(summ, [*width, "label"], "longest_ratio")
    lines += [
        f"## How far each curve extrapolates (threshold {threshold:g})",
        "",
        f"Longest evaluated length / L_train such that accuracy stays >= {threshold:g} x its "
        "value at L_train at every evaluated length from L_train up to it (mean over seeds).",
        "",
        to_markdown(_pivot(_label_order(longest, by_width=False), "model.width", ["label"], "mean"))
        if width
        else to_markdown(_label_order(longest).select("label", "mean", "n")),
        "",
    ]
    acc = q.aggregate_seeds(evals, [*width, "label", "length"], "accuracy")
    lines += [
        "## Accuracy by evaluation length (mean over seeds)",
        "",
        to_markdown(_pivot(_label_order(acc), "length", [*width, "label"], "mean")),
        "",
    ]
    ratio_cols = [c for c in summ.columns if c.startswith("loss_ratio_")]
    if ratio_cols:
        ratios = _label_order(
            summ.group_by([*width, "label"]).agg([pl.col(c).mean() for c in ratio_cols])
        )
        lines += [
            "## Loss at k x L_train / loss at L_train (mean over seeds)",
            "",
            to_markdown(ratios),
            "",
        ]
    base = evals.filter(
        ~pl.col("label").str.contains("/", literal=True) & (pl.col("length_ratio") == 1.0)
    )
    if width and base.get_column("model.width").n_unique() >= 2:
        fits = fits_table(base, x="model.width", y="loss", by=["model.position.kind"], n_boot=500)
        lines += [
            "## Loss at L_train vs width: fits of loss = a · width^(-b)",
            "",
            "95% bootstrap intervals over seeds (over points with one seed); two widths give "
            "an exact fit without an interval.",
            "",
            to_markdown(
                fits.select(
                    "model.position.kind", "a", "b", "b_ci_low", "b_ci_high", "r2", "n", "error"
                )
            ),
            "",
        ]
    ntk = q.ntk_table(res)
    if not ntk.is_empty() and "distance_from_init" in set(ntk["metric"]):
        final = q.ntk_final(ntk, "distance_from_init").rename({"value": "drift"})
        drift = fits_table(final, x="model.width", y="drift", by=["model.position.kind"])
        drift = drift.with_columns(
            (-pl.col("b")).alias("slope"),
            (-pl.col("b_ci_high")).alias("slope_ci_low"),
            (-pl.col("b_ci_low")).alias("slope_ci_high"),
        )
        lines += [
            "## NTK drift at the end of training vs width",
            "",
            "Slope of log(distance from init) vs log(width) (train kernel, whole model).",
            "",
            to_markdown(
                drift.select(
                    "model.position.kind", "slope", "slope_ci_low", "slope_ci_high", "n", "error"
                )
            ),
            "",
        ]
    lines += claims_lines(res)
    return lines, summ


def claims_lines(res: q.Results) -> list[str]:
    """The verdict table of every registered claim (`rope-lab claims`), as markdown."""
    from rope_lab.analysis.claims import format_verdicts, judge

    return [
        "## Claims",
        "",
        "Published claims judged on these runs (`rope-lab claims`): the effect on the seed "
        "means, its 95% bootstrap interval over seeds, and the verdict against the threshold.",
        "",
        format_verdicts(judge(res), "md"),
        "",
    ]


FIGURES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("extrapolation", "extrapolation", {"metric": "accuracy"}),
    ("extrapolation_loss", "extrapolation", {"metric": "loss"}),
    ("positions", "positions", {}),
    ("scaling", "scaling", {}),
    ("summary", "summary", {}),
    ("ntk-drift", "ntk-drift", {}),
    ("ntk-cross", "ntk-cross", {}),
)


def figures(res: q.Results, out: Path, formats: Sequence[str]) -> list[str]:
    """Write every figure that the data allows; markdown lines linking them."""
    from rope_lab.analysis import plots

    has_ntk = not q.ntk_table(res).is_empty()
    lines = ["## Figures", ""]
    for name, kind, options in FIGURES:
        if kind.startswith("ntk") and not has_ntk:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                fig = plots.plot(kind, res, **options)
        except q.QueryError as e:
            lines.append(f"- {name}: not drawn ({e})")
            continue
        plots.save(fig, out / f"{name}.{formats[0]}", formats=formats[1:])
        lines += [f"### {name}", "", f"![{name}]({name}.{formats[0]})", ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="report.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.md + figures")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--formats", default="png", help="comma-separated: png, pdf, svg")
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")
    args = parser.parse_args(argv)
    formats = [f.strip().lstrip(".") for f in args.formats.split(",") if f.strip()]
    try:
        res = q.results_of(args.run_dirs)
        args.out.mkdir(parents=True, exist_ok=True)
        lines, summ = tables(res, args.threshold)
        flat = [c for c, dt in summ.schema.items() if not isinstance(dt, pl.List)]
        summ.select(flat).write_csv(args.out / "extrapolation_summary.csv")
        if not args.no_figures:
            import matplotlib

            matplotlib.use("Agg")
            lines += figures(res, args.out, formats)
    except (q.QueryError, pl.exceptions.PolarsError, OSError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    title = f"# Length-extrapolation report: {', '.join(p.name for p in args.run_dirs)}"
    (args.out / "report.md").write_text("\n".join([title, "", *lines]).rstrip() + "\n")
    print(f"wrote {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

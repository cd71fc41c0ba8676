"""`rope-lab isoflop`: isoFLOP profiles and compute-optimal frontier exponents of run directories
(`rope_lab.analysis.isoflop`), printed as tables or written as csv / parquet / json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rope_lab.cli_analysis import FORMATS, check_output, one_line_errors, write_table
from rope_lab.cli_args import non_negative_int

__all__ = ["add_command", "cmd_isoflop"]

PROFILE_VIEW = (
    "compute",
    "n_points",
    "n_distinct",
    "n_star",
    "n_star_ci_low",
    "n_star_ci_high",
    "n_star_vs_1x",
    "d_star",
    "loss_at_min",
    "error",
)
FRONTIER_VIEW = ("n_profiles", "a", "a_ci_low", "a_ci_high", "b", "b_ci_low", "b_ci_high", "error")


def _ratios(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--ratio {text!r}: expected comma-separated numbers, e.g. 1,4") from None
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"--ratio {text!r}: expected positive numbers, e.g. 1,4")
    return values


def isoflop_frames(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The (profiles, frontier) tables of ``args.run_dirs`` and the metric they read."""
    import polars as pl

    from rope_lab.analysis.isoflop import isoflop_tables
    from rope_lab.analysis.plots.frames import eval_frame
    from rope_lab.analysis.query import QueryError, check_columns, loss_metric

    frame = eval_frame(list(args.run_dirs))
    metric = args.metric or loss_metric(frame)
    if args.ratio:
        wanted = _ratios(args.ratio)
        have = sorted(frame.get_column("length_ratio").unique().drop_nulls().to_list())
        absent = [r for r in wanted if r not in have]
        if absent:
            raise QueryError(f"--ratio {absent[0]:g}: no eval rows there; ratios are {have}")
        frame = frame.filter(pl.col("length_ratio").is_in(wanted))
    by = tuple(c.strip() for c in args.by.split(",") if c.strip())
    check_columns(frame, [*by, args.n], "--by/--n")
    if args.flops:
        check_columns(frame, [args.flops], "--flops-column")
    by = (*by, "length_ratio")
    profiles, frontier = isoflop_tables(
        frame, n=args.n, y=metric, by=by, flops=args.flops, n_boot=args.n_boot
    )
    return with_ratio_one(profiles, by), frontier, metric


def with_ratio_one(profiles: Any, by: tuple[str, ...]) -> Any:
    """``profiles`` with ``n_star_vs_1x``: N* over the N* of the same group and compute at
    length ratio 1 (null without that profile): does the optimum at 4 x L_train move?"""
    import polars as pl

    keys = [*(c for c in by if c != "length_ratio"), "compute"]
    base = profiles.filter(pl.col("length_ratio") == 1.0).select(*keys, _n1=pl.col("n_star"))
    joined = profiles.join(base, on=keys, how="left", nulls_equal=True, maintain_order="left")
    return joined.with_columns(n_star_vs_1x=pl.col("n_star") / pl.col("_n1")).drop("_n1")


def cmd_isoflop(args: argparse.Namespace) -> int:
    """Print or write the isoFLOP profile minima and frontier exponents per group and ratio."""
    from rope_lab.analysis.isoflop import COMPUTE_TOLERANCE
    from rope_lab.analysis.query import whole_tables

    check_output(args.output, args.run_dirs)
    profiles, frontier, metric = isoflop_frames(args)
    by = [c for c in frontier.columns if c not in (*FRONTIER_VIEW, "compute_source", "k")]
    if args.format == "json":
        both = {"profiles": profiles.to_dicts(), "frontier": frontier.to_dicts()}
        return _emit(_json(both), args.output, f"{profiles.height} profiles")
    if args.format in ("csv", "parquet"):
        joined = profiles.join(
            frontier.drop("compute_source").rename(
                {"n_profiles": "frontier_profiles", "error": "frontier_error"}
            ),
            on=by,
            how="left",
            nulls_equal=True,
        )
        written = write_table(joined, args.format, args.output)
        return _emit(written, args.output, f"{joined.height} profiles")
    source = profiles.get_column("compute_source")[0] if profiles.height else "6 N D"
    with whole_tables(220, 70):
        text = (
            f"isoFLOP profiles of {metric}: C = {source}, bucketed within "
            f"{COMPUTE_TOLERANCE:.0%}; parabola in log N per C\n"
            f"{profiles.select(*by, *PROFILE_VIEW)}\n"
            f"frontier N* ∝ C^a, D* ∝ C^b (b = 1 - a)\n{frontier.select(*by, *FRONTIER_VIEW)}"
        )
    return _emit(text, args.output, f"{profiles.height} profiles")


def _json(obj: Any) -> str:
    import json

    def plain(v: Any) -> Any:
        return None if isinstance(v, float) and v != v else v

    rows = {k: [{c: plain(v) for c, v in r.items()} for r in rs] for k, rs in obj.items()}
    return json.dumps(rows, indent=1)


def _emit(text: str | None, output: Path | None, what: str) -> int:
    if text is None:
        print(f"wrote {what} to {output}")
    elif output is not None:
        output.write_text(text if text.endswith("\n") else text + "\n")
        print(f"wrote {what} to {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``isoflop`` subcommand to the `rope-lab` parser."""
    p = subparsers.add_parser(
        "isoflop",
        help="isoFLOP profiles and the compute-optimal frontier N* ∝ C^a of run directories",
        description="Trials grouped by training compute C (6 N D, or --flops-column), within "
        "10%, per group of --by and evaluation length ratio: each profile with at least 3 "
        "distinct N is fitted by a parabola in log N whose minimum is N*(C), D* = C / (6 N*) "
        "(Hoffmann et al. 2022, approach 2), with bootstrap intervals resampling the seeds "
        "at each N; profiles with too few N, or a minimum outside the sampled N, are refused "
        "with the reason. Then N* ∝ C^a and D* ∝ C^b over the profiles.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--by",
        metavar="COLS",
        default="task.name,corpus,label",
        help="comma-separated columns, one frontier per group and length ratio "
        "(default: task.name,corpus,label; corpus: a text task's corpus; label names the "
        "encoding and scaling)",
    )
    p.add_argument(
        "--ratio",
        metavar="R[,R...]",
        help="evaluation length ratios (length / train.length); default: all",
    )
    p.add_argument(
        "--n",
        default="n_params_non_embedding",
        metavar="COL",
        help="size column (default n_params_non_embedding; or n_params)",
    )
    p.add_argument(
        "--flops-column",
        dest="flops",
        metavar="COL",
        help="column holding each trial's training FLOPs (default: C = 6 N D, D "
        "the tokens_seen column)",
    )
    p.add_argument(
        "--metric",
        choices=("loss", "bits_per_byte"),
        help="the loss: default bits_per_byte when every trial has it, else loss",
    )
    p.add_argument(
        "--n-boot",
        type=non_negative_int,
        default=200,
        help="bootstrap refits per profile (default 200; 0: no intervals)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table, or csv / parquet (one row per profile with its group's "
        "exponents) / json (profiles and frontier)",
    )
    p.add_argument("--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.set_defaults(func=one_line_errors(cmd_isoflop))

"""`rope-lab claims RUN_DIR...`: the verdict table of the registered claims on some runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rope_lab.cli_args import positive_int


def _count_trials(run_dirs: list[Path]) -> int:
    """Rows of the trials tables of `run_dirs` (RunDirError / CorruptFile as `load`)."""
    import polars as pl

    from rope_lab.results import load

    return int(load(run_dirs).trials.select(pl.len()).collect().item())


def _cmd_claims(args: argparse.Namespace) -> int:
    from rope_lab.analysis.claims import format_verdicts, judge, left_out_line, readable
    from rope_lab.analysis.query import QueryError
    from rope_lab.cli_analysis import check_output
    from rope_lab.registry import CLAIMS, UnknownName

    check_output(args.output, args.run_dirs)
    try:
        for name in args.claim or []:
            CLAIMS[name]
        if not _count_trials(args.run_dirs):
            where = ", ".join(str(p) for p in args.run_dirs)
            raise ValueError(f"no trials in {where} (nothing to judge: run a sweep into it first)")
        options = {"min_seeds": args.min_seeds, "n_boot": args.n_boot}
        if args.stability:
            return _stability(args, options)
        if args.setup:
            raise ValueError("--setup needs --stability")
        verdicts = judge(args.run_dirs, args.claim, **options)
    except (QueryError, UnknownName, ValueError, OSError) as e:
        print(f"rope-lab: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    footer = ""
    if not args.claim:  # a claim asked for by name shows every row, as the stability table
        verdicts, unread = readable(verdicts)
        footer = left_out_line(unread)
    text = format_verdicts(verdicts, args.format, footer)
    if args.output is not None:
        args.output.write_text(text + "\n")
    else:
        print(text)
    return 0


def _stability(args: argparse.Namespace, options: dict[str, int]) -> int:
    """The stability table of the runs: text to stdout or --output, or a .parquet / .csv file."""
    from rope_lab.analysis.claims import evidence_frames
    from rope_lab.analysis.claims.stability import format_stability, stability_frame

    frame = stability_frame(
        evidence_frames(args.run_dirs), args.claim, fields=args.setup, **options
    )
    out = args.output
    if out is not None and out.suffix == ".parquet":
        frame.write_parquet(out)
    elif out is not None and out.suffix == ".csv":
        frame.write_csv(out)
    else:
        text = format_stability(frame, args.format)
        if out is None:
            print(text)
        else:
            out.write_text(text + "\n")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register the `claims` subcommand on the `rope-lab` parser."""
    p = sub.add_parser(
        "claims",
        help="judge published claims (holds / fails / inconclusive) on run directories",
        description="One row per claim and scope: its verdict, effect size with a bootstrap "
        "interval over seeds, threshold and seed count (an unknown --claim lists the names).",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", choices=("table", "md", "json"), default="table")
    p.add_argument("--claim", action="append", help="judge only this claim (repeatable)")
    p.add_argument(
        "--min-seeds",
        type=positive_int,
        default=2,
        help="seeds an arm needs for a verdict (default 2; 1 judges single seeds on their "
        "point values, without an interval)",
    )
    p.add_argument(
        "--n-boot", type=positive_int, default=2000, help="bootstrap resamples (default 2000)"
    )
    p.add_argument(
        "--stability",
        action="store_true",
        help="one row per claim and scope, one column per (corpus, setup) cell holding its "
        "verdict and effect, and `stable`: true only when every cell the row belongs in has "
        "the same verdict, holds or fails (an inconclusive or missing cell makes it false). "
        "The corpus is a text task's task.params.path; the setup is the model.* and train.* "
        "fields that vary between trials, are crossed with every encoding of their task, and "
        "are not the seed nor an encoding's or variant's field (or the --setup fields)",
    )
    p.add_argument(
        "--setup",
        action="append",
        metavar="FIELD",
        help="with --stability: a config column that makes a setup (repeatable; replaces the "
        "derived fields)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help="write to this file, not stdout (with --stability, a .parquet or .csv path writes "
        "that format)",
    )
    p.set_defaults(func=_cmd_claims)

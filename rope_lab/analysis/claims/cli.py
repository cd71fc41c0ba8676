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
    from rope_lab.analysis.claims import format_verdicts, judge
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
        verdicts = judge(args.run_dirs, args.claim, min_seeds=args.min_seeds, n_boot=args.n_boot)
    except (QueryError, UnknownName, ValueError, OSError) as e:
        print(f"rope-lab: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    text = format_verdicts(verdicts, args.format)
    if args.output is not None:
        args.output.write_text(text + "\n")
    else:
        print(text)
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
    p.add_argument("--output", type=Path, default=None, help="write to this file, not stdout")
    p.set_defaults(func=_cmd_claims)

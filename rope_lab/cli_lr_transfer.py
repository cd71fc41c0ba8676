"""`rope-lab lr-transfer`: the optimal learning rate per width and the slope of log lr* against
log width of run directories (`rope_lab.analysis.lr_transfer`), printed or written as a table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rope_lab.cli_analysis import one_line_errors
from rope_lab.cli_args import non_negative_int

__all__ = ["add_command", "cmd_lr_transfer", "lr_transfer_frames"]

OPTIMA_VIEW = ("width", "best_lr", "lr_star", "lr_star_ci_low", "lr_star_ci_high",
               "loss_at_star", "seeds", "fit", "error")  # fmt: skip
SLOPE_VIEW = ("widths", "slope", "slope_ci_low", "slope_ci_high", "seeds", "replicates", "error")


def lr_transfer_frames(run_dirs: list[Path], metric: str | None, n_boot: int) -> tuple[Any, ...]:
    """(optima, slopes, metric) of the trials of ``run_dirs`` per task, parametrisation and
    evaluated length ratio; ``metric`` None: bits per byte when every trial has it, else loss."""
    from rope_lab.analysis.lr_transfer import lr_transfer_tables
    from rope_lab.analysis.plots.frames import eval_frame
    from rope_lab.analysis.query import loss_metric

    frame = eval_frame(list(run_dirs))
    metric = metric or loss_metric(frame)
    optima, slopes = lr_transfer_tables(frame, y=metric, n_boot=n_boot)
    return optima, slopes, metric


def cmd_lr_transfer(args: argparse.Namespace) -> int:
    """Print (or write with --output) the optima and slopes tables."""
    from rope_lab.analysis.query import whole_tables

    if args.output is not None:
        from rope_lab.cli_analysis import check_output

        check_output(args.output, args.run_dirs)
    optima, slopes, metric = lr_transfer_frames(args.run_dirs, args.metric, args.n_boot)
    by = [c for c in slopes.columns if c not in SLOPE_VIEW]
    with whole_tables(220, 100):
        text = (
            f"optimal lr per width ({metric}; parabola in log lr through the best lr and its "
            f"neighbours; 95% seed-bootstrap interval)\n{optima.select(*by, *OPTIMA_VIEW)}\n"
            f"slope of log lr* against log width\n{slopes.select(*by, *SLOPE_VIEW)}\n"
        )
    if args.output is None:
        print(text, end="")
    else:
        args.output.write_text(text)
        print(f"wrote {optima.height} optima and {slopes.height} slopes to {args.output}")
    return 0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``lr-transfer`` subcommand to the `rope-lab` parser."""
    p = subparsers.add_parser(
        "lr-transfer",
        help="the optimal learning rate per width and its slope in width, of run directories",
        description="Per task, parametrisation (model.parametrization) and evaluated length "
        "ratio: the loss of each (width, lr) averaged over seeds, the optimal lr per width as "
        "the vertex of the parabola in log lr through the best lr and its two neighbours "
        "(refused when the best lr is at the edge of the grid), and the slope of log lr* "
        "against log width, with percentile bootstrap intervals resampling the seeds.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--metric",
        choices=("loss", "bits_per_byte"),
        help="the loss: default bits_per_byte when every trial has it, else loss",
    )
    p.add_argument(
        "--n-boot",
        type=non_negative_int,
        default=200,
        help="bootstrap replicates (default 200; 0: no intervals)",
    )
    p.add_argument("--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.set_defaults(func=one_line_errors(cmd_lr_transfer))

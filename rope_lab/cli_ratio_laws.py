"""`rope-lab loss-law --by-ratio`: loss laws at every evaluated length ratio, the extrapolation
gap's exponent in N and held-out checks of separate and joint laws
(`rope_lab.analysis.ratio_laws`), printed as a table or written as csv / parquet / json."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rope_lab.cli_analysis import check_output, write_table

__all__ = ["RATIO_VIEW", "cmd_loss_law_by_ratio", "ratio_frame"]

RATIO_VIEW = (
    "length_ratio",
    "law",
    "n_trials",
    "alpha",
    "E",
    "heldout_max_rel_error",
    "joint_heldout_max_rel_error",
    "gamma",
    "gamma_ci_low",
    "gamma_ci_high",
    "gap_nonpositive",
    "error",
    "gap_error",
)


def ratio_frame(args: argparse.Namespace) -> tuple[Any, str, tuple[str, ...]]:
    """The per-ratio table of ``args.run_dirs``, the metric it fits and its group columns
    (``--by`` and ``label``: the encoding with its scaling or remap method and fine-tuning)."""
    from rope_lab.analysis.plots.frames import eval_frame
    from rope_lab.analysis.query import loss_metric
    from rope_lab.analysis.ratio_laws import ratio_law_table

    frame = eval_frame(list(args.run_dirs))
    metric = args.metric or loss_metric(frame)
    by = tuple(c.strip() for c in (args.by or "").split(",") if c.strip())
    by = (*by, "label") if "label" not in by else by
    table = ratio_law_table(
        frame, n=args.n, y=metric, by=by, n_boot=args.n_boot, law_boot=args.law_boot
    )
    return table, metric, by


def cmd_loss_law_by_ratio(args: argparse.Namespace) -> int:
    """Print or write the loss laws per group and length ratio, with gap exponents."""
    from rope_lab.analysis.query import QueryError, whole_tables

    if args.length_ratio is not None:
        raise QueryError("--length-ratio and --by-ratio both given: --by-ratio fits every ratio")
    check_output(args.output, args.run_dirs)
    table, metric, by = ratio_frame(args)
    if args.format != "table":
        text = write_table(table, args.format, args.output)
    else:
        with whole_tables(240, 80):
            text = (
                f"{metric} vs {args.n} per length ratio r = L_eval / L_train: L = E + A / "
                "N^alpha (+ B / D^beta); held-out: fitted without the largest N (and D), "
                "separate laws vs the joint law E(r) + A / N^alpha(r) (E, alpha linear in "
                "log2 r); gap G = loss(r) - loss(1x) = g N^gamma, 95% CI over seeds "
                f"(gamma < 0: scale closes the gap)\n{table.select(*by, *RATIO_VIEW)}"
            )
    if text is None:
        print(f"wrote {table.height} fits to {args.output}")
    elif args.output is not None:
        args.output.write_text(text if text.endswith("\n") else text + "\n")
        print(f"wrote {table.height} fits to {args.output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0

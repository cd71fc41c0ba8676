"""`rope-lab coord-check CONFIG`: the coordinate check of a trial's model across widths and
parametrisations (`rope_lab.trial.coord_check`), printed as tables or written as Parquet."""

from __future__ import annotations

import argparse
from pathlib import Path

from rope_lab.cli_args import positive_int

__all__ = ["add_command", "cmd_coord_check", "comma_list"]


def comma_list(text: str) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c'] (empty items dropped)."""
    return [t.strip() for t in text.split(",") if t.strip()]


def _widths(text: str) -> list[int]:
    try:
        return [int(w) for w in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated integers, e.g. 32,64,128"
        ) from None


def cmd_coord_check(args: argparse.Namespace) -> int:
    """Run the coordinate check of ``args.config`` and print (or write) its rows and slopes."""
    from rope_lab.config import load_trial
    from rope_lab.trial.coord_check import check_request

    cfg = load_trial(args.config)
    params = comma_list(args.parametrizations)
    check_request(cfg, args.widths, params)  # every refusal before any training
    if args.output is not None:
        from rope_lab.results.targets import check_output_file

        check_output_file(args.output)
    from rope_lab.analysis.query import whole_tables
    from rope_lab.trial.coord_check import coord_check, width_slopes

    frame = coord_check(cfg, args.widths, params, steps=args.steps)
    print(
        f"coordinate check: widths {args.widths} (base width {cfg.model.base_width}), "
        f"{args.steps} steps at lr {cfg.train.lr:g}"
    )
    with whole_tables(120, 20):
        print(frame.drop("steps", "lr"))
        print("slope of log RMS against log width:")
        print(width_slopes(frame))
    if args.output is not None:
        frame.write_parquet(args.output)
        print(f"wrote {args.output}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register `coord-check` on the `rope-lab` subcommand parser."""
    p = sub.add_parser(
        "coord-check",
        help="activation size and its change after a few steps, per layer, across widths",
        description="For each parametrisation and width: the RMS of every layer's activations "
        "(embedding, each block's attention and MLP outputs and residual stream, logits) at "
        "init, and of their change after --steps optimiser steps at the config's lr (no "
        "warmup or decay). Under muP the change should not grow with width.",
    )
    p.add_argument("config", type=Path, help="trial YAML: the model, task, batch and lr")
    p.add_argument(
        "--widths", type=_widths, default=[32, 64, 128], help="comma-separated (default 32,64,128)"
    )
    p.add_argument(
        "--parametrizations",
        default="sp,ntk,mup",
        help="comma-separated, of sp, ntk, mup (default all three)",
    )
    p.add_argument("--steps", type=positive_int, default=4, help="optimiser steps (default 4)")
    p.add_argument("--output", type=Path, default=None, help="write the rows as Parquet")
    p.set_defaults(func=cmd_coord_check)

"""`rope-lab` command line: train one trial (sweeps, results and plots come as subcommands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_train(args: argparse.Namespace) -> int:
    from rope_lab.config import load_trial

    cfg = load_trial(args.config)  # validated before any heavy import
    from rope_lab.evaluate import format_table
    from rope_lab.trial import run_trial

    print(
        f"trial {cfg.trial_id}: {cfg.model.position.kind} PE, width {cfg.model.width}, "
        f"depth {cfg.model.depth}, task {cfg.task.name}, L_train {cfg.train.length}",
        flush=True,
    )
    outcome = run_trial(cfg)
    last = outcome.history[-1] if outcome.history else {}
    rates = sorted(r["tokens_per_s"] for r in outcome.history[1:]) or [0.0]
    print(
        f"status {outcome.status}: {len(outcome.history)} log rows, final loss "
        f"{last.get('loss', float('nan')):.4f}, {outcome.n_params:,} params, "
        f"train {outcome.train_time_s:.1f}s ({rates[len(rates) // 2]:,.0f} tokens/s median), "
        f"total {outcome.wall_time_s:.1f}s"
    )
    if outcome.eval_rows:
        print()
        print(format_table(outcome.eval_rows, "accuracy"))
        print()
        print(format_table(outcome.eval_rows, "loss"))
        print()
        threshold = cfg.eval.accuracy_threshold
        print(f"longest length keeping >= {threshold:.0%} of in-distribution accuracy:")
        for s in outcome.summary:
            print(
                f"  {s['method']:<10} factor {s['factor']:<4g} ft {s['finetune_steps']:<5} "
                f"-> {s['longest_length']}"
            )
    if args.out:
        from rope_lab.trial_io import write_outcome

        path = write_outcome(outcome, Path(args.out))
        print(f"\nresults written to {path}")
    return 0 if outcome.status == "done" else 2


def build_parser() -> argparse.ArgumentParser:
    """The `rope-lab` argument parser."""
    parser = argparse.ArgumentParser(
        prog="rope-lab",
        description="Length-extrapolation experiments for position encodings and RoPE scaling.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "train",
        help="train and evaluate one trial from a YAML config",
        description="Train one trial, then print its metric-by-length table across RoPE "
        "scaling methods and factors. Exit code 2 if the run diverged.",
    )
    p.add_argument("config", type=Path, help="trial YAML file (see examples/rope_passkey.yaml)")
    p.add_argument("--out", type=Path, default=None, help="folder for config and Parquet results")
    p.set_defaults(func=_cmd_train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; configuration errors print one line and exit 1, without a traceback."""
    from rope_lab.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as err:
        print(f"rope-lab: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rope-lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

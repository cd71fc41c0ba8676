"""`rope-lab` command line: train one trial (sweeps, results and plots come as subcommands)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from rope_lab.cli_args import positive_float
from rope_lab.runtime.allocator import reexec_tuned


def _cmd_train(args: argparse.Namespace) -> int:
    from rope_lab.config import load_trial

    cfg = load_trial(args.config)  # validated before any heavy import
    from rope_lab.trial.processes import check_launch

    check_launch(cfg)  # this machine's cores and coordinator port, for several processes
    if args.out is not None:
        from rope_lab.results.targets import check_run_target

        check_run_target(args.out)
    from rope_lab.trial.evaluate import format_table
    from rope_lab.trial.run import TrialError, run_trial

    print(
        f"trial {cfg.trial_id}: {cfg.model.position.kind} PE, width {cfg.model.width}, "
        f"depth {cfg.model.depth}, task {cfg.task.name}, L_train {cfg.train.length}",
        flush=True,
    )
    try:
        outcome = run_trial(cfg, args.out)
    except TrialError as err:
        print(f"rope-lab: error: {err}", file=sys.stderr)
        return 1
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
        if any(r.get("bits_per_byte") is not None for r in outcome.eval_rows):  # text tasks
            print(format_table(outcome.eval_rows, "bits_per_byte"))
            print()
        threshold = cfg.eval.accuracy_threshold
        print(f"longest length keeping >= {threshold:.0%} of in-distribution accuracy:")
        for s in outcome.summary:
            print(
                f"  {s['method']:<10} factor {s['factor']:<4g} ft {s['finetune_steps']:<5} "
                f"-> {s['longest_length']}"
            )
    if outcome.folder is not None:
        print(f"\nresults written to {outcome.folder}")
    return 0 if outcome.status == "done" else 2


def _load_slice(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The spec of ``args.spec``, validated, cut to ``args.only``'s trials (`sweep.slicing`)."""
    from rope_lab.sweep.slicing import parse_only, slice_spec
    from rope_lab.sweep.spec import load_spec

    return slice_spec(load_spec(args.spec), parse_only(args.only))


def _cmd_sweep_run(args: argparse.Namespace) -> int:
    spec = _load_slice(args)  # validated before any work starts
    spec = _with_tracking_flags(spec, args)
    from rope_lab.results.targets import check_run_target

    check_run_target(Path(args.out) / spec.name)
    from rope_lab.sweep.report import failure_lines, next_steps, summary_table
    from rope_lab.sweep.runner import run_sweep

    for warning in spec.warnings:
        print(f"warning: {warning}", flush=True)
    print(
        f"sweep {spec.name}: {len(spec.trials)} trials -> {Path(args.out) / spec.name}", flush=True
    )
    summary = run_sweep(spec, args.out, runner=args.runner, address=args.address)
    print()
    print(summary_table(summary.run_dir))
    if not args.no_plots:
        for path in _write_plots(summary.run_dir):
            print(f"plot written: {path}")
    failures = failure_lines(summary.run_dir, summary.statuses)
    if failures:
        print("\nfailed or diverged trials:")
        print("\n".join(f"  {line}" for line in failures))
    print(
        f"\n{summary.count('done')} done, {summary.count('diverged')} diverged, "
        f"{summary.count('failed')} failed, {summary.skipped} skipped (already finished), "
        f"{summary.count('busy')} busy (held by another driver); wall {summary.wall_time_s:.1f}s"
    )
    print("\n".join(next_steps(summary.run_dir)))
    return 1 if summary.count("failed") else 0


def _with_tracking_flags(spec, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """`spec` with `--tensorboard` / `--wandb` in place of its `tracking` block's values; a
    tracker flag whose package is missing is a ConfigError naming the flag and the extra."""
    import dataclasses

    from rope_lab.config import ConfigError
    from rope_lab.tracking.config import TrackingConfig, tracking_errors, with_flags

    flags = {"tensorboard": args.tensorboard, "wandb": args.wandb}
    errors = tracking_errors(TrackingConfig(**flags), prefix="--")
    if errors:
        raise ConfigError("\n".join(errors))
    return dataclasses.replace(spec, tracking=with_flags(spec.tracking, **flags))


def _write_plots(run_dir: Path) -> list[Path]:
    """The extrapolation curves and the summary page of a run, as PNG under RUN_DIR/plots/."""
    from rope_lab.analysis.plots import plot

    written = []
    for kind in ("extrapolation", "summary"):
        out = run_dir / "plots" / f"{kind}.png"
        try:
            plot(kind, run_dir, out=out)
        except Exception as err:  # a sweep's results outlive a failed figure
            print(f"plot {kind} skipped: {err}", file=sys.stderr)
            continue
        written.append(out)
    return written


def _cmd_sweep_plan(args: argparse.Namespace) -> int:
    from rope_lab.sweep.plan_table import plan_table

    print(plan_table(_load_slice(args), flops_per_s=args.flops))
    return 0


def _cmd_sweep_status(args: argparse.Namespace) -> int:
    from rope_lab.sweep.report import status_table

    print(status_table(Path(args.run_dir)))
    return 0


def _cmd_sweep_time(args: argparse.Namespace) -> int:
    from rope_lab.sweep.time_shares import time_report

    print(time_report(args.run_dirs))
    return 0


def _cmd_sweep_submit(args: argparse.Namespace) -> int:
    from rope_lab.sweep.spec import load_spec

    load_spec(args.spec)
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(args.address)
    entrypoint = f"rope-lab sweep run {args.spec} --address auto --out {args.out}"
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": "."})
    print(f"submitted {job_id}: {entrypoint}")
    print(f"follow it with: ray job logs --follow --address {args.address} {job_id}")
    return 0


def _add_only(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="only the trials whose axis KEY takes VALUE (repeatable: all must hold), e.g. "
        "--only task.name=lm_text; they run into the sweep's own run directory",
    )


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser("sweep", help="run, plan, inspect or submit a sweep of trials")
    ssub = sweep.add_subparsers(dest="sweep_command", required=True, metavar="SWEEP_COMMAND")
    p = ssub.add_parser(
        "run",
        help="run a sweep spec (in-process Ray by default)",
        description="Run every unfinished trial of a sweep. Finished trials are skipped, "
        "interrupted ones resume from their checkpoints. Exit code 1 if any trial failed.",
    )
    p.add_argument("spec", type=Path, help="sweep YAML, e.g. sweeps/smoke.yaml")
    p.add_argument("--address", default=None, help="Ray cluster address (default: in-process)")
    p.add_argument(
        "--runner",
        choices=("ray", "serial"),
        default="ray",
        help="ray (default) or serial: same stages in this process, for debugging",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="parent of the run directory OUT/NAME (NAME: the spec's name; default runs)",
    )
    p.add_argument(
        "--no-plots",
        action="store_true",
        help="skip writing RUN_DIR/plots/extrapolation.png and summary.png",
    )
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        default=None,
        help="log each trial live to TensorBoard event files under DIR/NAME/<trial_id> "
        "(overrides the spec's tracking.tensorboard; needs the tracking extra)",
    )
    p.add_argument(
        "--wandb",
        metavar="PROJECT",
        default=None,
        help="log each trial live as the W&B run <trial_id> of PROJECT, grouped by the sweep; "
        "offline under OUT/NAME/wandb unless WANDB_API_KEY is set (overrides the spec's "
        "tracking.wandb; needs the tracking extra)",
    )
    _add_only(p)
    p.set_defaults(func=_cmd_sweep_run)
    p = ssub.add_parser("plan", help="list the trials and their estimated cost without running")
    p.add_argument("spec", type=Path)
    _add_only(p)
    p.add_argument(
        "--flops",
        type=positive_float,
        default=20e9,
        help="sustained FLOP/s assumed for the time column (default 20e9)",
    )
    p.set_defaults(func=_cmd_sweep_plan)
    p = ssub.add_parser("status", help="show the trials of a run directory and their status")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=_cmd_sweep_status)
    p = ssub.add_parser(
        "time",
        help="where a run's time went: wall and compile seconds per stage group and phase, "
        "the shares of training, evaluating and compiling, and the run's span",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.set_defaults(func=_cmd_sweep_time)
    p = ssub.add_parser("submit", help="submit a sweep to a Ray cluster as a Ray job")
    p.add_argument("spec", type=Path)
    p.add_argument("--address", required=True, help="Ray job server, e.g. http://HEAD:8265")
    p.add_argument("--out", type=Path, default=Path("runs"))
    p.set_defaults(func=_cmd_sweep_submit)


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
        "scaling methods and factors. Exit code 2 if the run diverged, 1 if a stage failed.",
    )
    p.add_argument("config", type=Path, help="trial YAML file (see examples/rope_passkey.yaml)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory: the trial goes to OUT/trials/<trial_id>/ in the sweep layout and "
        "a rerun resumes it (default: a temporary folder, removed at the end)",
    )
    p.set_defaults(func=_cmd_train)
    _add_sweep(sub)
    from rope_lab.analysis.claims.cli import add_command as add_claims
    from rope_lab.cli_analysis import add_commands
    from rope_lab.cli_coord_check import add_command as add_coord_check
    from rope_lab.cli_corpus import add_command as add_corpus
    from rope_lab.cli_hf import add_command as add_export
    from rope_lab.cli_isoflop import add_command as add_isoflop
    from rope_lab.cli_kernel_map import add_command as add_kernel_map
    from rope_lab.cli_lr_transfer import add_command as add_lr_transfer
    from rope_lab.cli_reference import add_command as add_reference

    add_commands(sub)
    add_claims(sub)
    add_coord_check(sub)
    add_corpus(sub)
    add_export(sub)
    add_isoflop(sub)
    add_lr_transfer(sub)
    add_kernel_map(sub)
    add_reference(sub)
    return parser


def _file_warnings_in_one_line() -> None:
    """Print FileChanged warnings (a damaged file a rerun recomputes) as one
    `rope-lab: warning:` line, not Python's file:line and source."""
    from rope_lab.runtime.checked_files import FileChanged

    plain = warnings.formatwarning
    if getattr(plain, "rope_lab", False):
        return

    def one_line(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, FileChanged):
            return f"rope-lab: warning: {message}\n"
        return plain(message, category, filename, lineno, line)

    one_line.rope_lab = True  # type: ignore[attr-defined]
    warnings.formatwarning = one_line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; configuration errors print one line and exit 1, without a traceback."""
    from rope_lab.config import ConfigError

    if argv is None:  # started as a command: restart once with the tuned allocator
        reexec_tuned()
    _file_warnings_in_one_line()
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

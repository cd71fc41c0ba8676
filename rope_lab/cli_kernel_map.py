"""`rope-lab kernel-map SPEC`: the tail kernel at initialisation of every trial of a sweep spec,
without training (`rope_lab.ntk.kernel_map`), printed with its vanishing ratios
(`rope_lab.analysis.kernel_map`) and written as Parquet for `rope-lab plot kernel-map`.
`rope-lab kernel-map --from-run RUN_DIR...`: the same map at initialisation and after training,
read from the NTK rows of trained runs (`rope_lab.ntk.trained_map`), the two stages' vanishing
ratios side by side."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

from rope_lab.typed import ConfigError

__all__ = ["add_command", "cmd_kernel_map", "map_order", "parse_step"]


def map_order(trials: Sequence[TrialConfig]) -> list[TrialConfig]:
    """The trials with the most common (parametrisation, width) first, then by depth: a map
    stopped early has the depth axis of its main setting before the other settings."""
    settings = Counter((t.model.parametrization, t.model.width) for t in trials)
    main = settings.most_common(1)[0][0] if settings else None
    return sorted(
        trials, key=lambda t: ((t.model.parametrization, t.model.width) != main, t.model.depth)
    )


def parse_step(text: str) -> int | None:
    """``--step``: "last" (None) or a step > 0; ConfigError naming the flag otherwise."""
    if text == "last":
        return None
    if not text.isdigit() or int(text) == 0:
        raise ConfigError(f"--step: expected 'last' or a training step > 0, got {text!r}")
    return int(text)


def cmd_kernel_map(args: argparse.Namespace) -> int:
    """Measure each trial of ``args.spec`` at init (or read ``args.from_run``'s runs), write
    the rows and print the crossings."""
    if (args.spec is None) == (not args.from_run):
        raise ConfigError("kernel-map: give a sweep SPEC or --from-run RUN_DIR..., not both")
    if args.step is not None and not args.from_run:
        raise ConfigError("kernel-map: --step reads a trained run; give it with --from-run")
    if args.output is not None:
        from rope_lab.results.targets import check_output_file

        check_output_file(args.output)
    if args.from_run:
        return _from_runs(args.from_run, parse_step(args.step or "last"), args.output)
    from rope_lab.sweep.spec import load_spec

    spec = load_spec(args.spec)
    import polars as pl

    from rope_lab.analysis.kernel_map import vanishing_table
    from rope_lab.analysis.query import whole_tables
    from rope_lab.ntk.kernel_map import measure_at_init

    rows, start = [], time.perf_counter()
    trials = map_order(spec.trials)
    for i, cfg in enumerate(trials, 1):
        point = time.perf_counter()
        rows += measure_at_init(cfg)
        print(
            f"[{i}/{len(trials)}] {cfg.model.position.kind} depth {cfg.model.depth} "
            f"width {cfg.model.width} {cfg.model.parametrization}: "
            f"{time.perf_counter() - point:.1f}s",
            flush=True,
        )
        if args.output is not None:  # a stopped map keeps the points it measured
            pl.DataFrame(rows).write_parquet(args.output)
    frame = pl.DataFrame(rows)
    print(f"{len(spec.trials)} points in {time.perf_counter() - start:.0f}s")
    with whole_tables(200, 200):
        print(vanishing_table(frame))
    if args.output is not None:
        print(f"wrote {args.output}")
    return 0


def _from_runs(paths: Sequence[Path], step: int | None, output: Path | None) -> int:
    """The map at init and after training of the runs under ``paths``: rows, side by side."""
    import polars as pl

    from rope_lab.analysis.kernel_map import stages_side_by_side, vanishing_table
    from rope_lab.analysis.query import whole_tables
    from rope_lab.ntk.kernel_map import COLLAPSE
    from rope_lab.ntk.trained_map import rows_from_run
    from rope_lab.results import run_directories

    runs = run_directories(paths)
    rows = [row for run in runs for row in rows_from_run(run, step)]
    frame = pl.DataFrame(rows, schema_overrides={"seconds": pl.Float64, COLLAPSE: pl.Float64})
    trained = sorted(set(frame.filter(pl.col("stage") == "trained")["step"].to_list()))
    print(
        f"{frame['trial_id'].n_unique()} trials of {len(runs)} run(s): init at step 0, "
        f"trained at step {', '.join(map(str, trained))}"
    )
    with whole_tables(320, 200):  # both stages on one line
        print(stages_side_by_side(vanishing_table(frame)))
    if output is not None:
        frame.write_parquet(output)
        print(f"wrote {output}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register `kernel-map` on the `rope-lab` subcommand parser."""
    p = sub.add_parser(
        "kernel-map",
        help="the tail kernel at initialisation of a sweep's models, without training",
        description="For each trial of SPEC: the NTK (and, with ntk.nngp_samples, the NNGP) "
        "tail cosine and the kernel-predicted tail movement at every ntk.probe_multipliers "
        "ratio, at initialisation (nothing is trained or evaluated); then, per encoding, depth, "
        "width and parametrisation, the smallest ratio where the tail cosine falls below the "
        "vanishing threshold, or its log-linear trend's extrapolation. With --from-run: the "
        "same rows from the NTK rows a trained run recorded at step 0 and at --step, and the "
        "two stages' ratios side by side.",
    )
    p.add_argument("spec", type=Path, nargs="?", help="sweep YAML, e.g. sweeps/kernel_map.yaml")
    p.add_argument(
        "--from-run",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="instead of SPEC: trained run directories (or folders of them) with NTK rows; the "
        "map at step 0 (init) and at --step (trained), side by side",
    )
    p.add_argument(
        "--step",
        default=None,
        help="with --from-run: the trained stage's step, 'last' (default: each trial's last "
        "tracked NTK step) or a tracked step",
    )
    p.add_argument("--output", type=Path, default=None, help="write the rows as Parquet")
    p.set_defaults(func=cmd_kernel_map)

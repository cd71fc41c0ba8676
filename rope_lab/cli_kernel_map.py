"""`rope-lab kernel-map SPEC`: the tail kernel at initialisation of every trial of a sweep spec,
without training (`rope_lab.ntk.kernel_map`), printed with its vanishing ratios
(`rope_lab.analysis.kernel_map`) and written as Parquet for `rope-lab plot kernel-map`."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

__all__ = ["add_command", "cmd_kernel_map", "map_order"]


def map_order(trials: Sequence[TrialConfig]) -> list[TrialConfig]:
    """The trials with the most common (parametrisation, width) first, then by depth: a map
    stopped early has the depth axis of its main setting before the other settings."""
    settings = Counter((t.model.parametrization, t.model.width) for t in trials)
    main = settings.most_common(1)[0][0] if settings else None
    return sorted(
        trials, key=lambda t: ((t.model.parametrization, t.model.width) != main, t.model.depth)
    )


def cmd_kernel_map(args: argparse.Namespace) -> int:
    """Measure each trial of ``args.spec`` at init, write the rows and print the crossings."""
    from rope_lab.sweep.spec import load_spec

    spec = load_spec(args.spec)
    if args.output is not None:
        from rope_lab.results.targets import check_output_file

        check_output_file(args.output)
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


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register `kernel-map` on the `rope-lab` subcommand parser."""
    p = sub.add_parser(
        "kernel-map",
        help="the tail kernel at initialisation of a sweep's models, without training",
        description="For each trial of SPEC: the NTK (and, with ntk.nngp_samples, the NNGP) "
        "tail cosine and the kernel-predicted tail movement at every ntk.probe_multipliers "
        "ratio, at initialisation (nothing is trained or evaluated); then, per encoding, depth, "
        "width and parametrisation, the smallest ratio where the tail cosine falls below the "
        "vanishing threshold, or its log-linear trend's extrapolation.",
    )
    p.add_argument("spec", type=Path, help="sweep YAML, e.g. sweeps/kernel_map.yaml")
    p.add_argument("--output", type=Path, default=None, help="write the rows as Parquet")
    p.set_defaults(func=cmd_kernel_map)

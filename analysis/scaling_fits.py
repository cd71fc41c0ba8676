"""Fit power laws y = a · x^(-b) (+ c) to one metric of run directories, per group.

Usage::

    python analysis/scaling_fits.py runs/widths --metric loss
    python analysis/scaling_fits.py runs/widths --metric loss --length-ratio 4 --offset
    python analysis/scaling_fits.py runs/widths --metric distance_from_init --x n_params \\
        --by model.position.kind,model.parametrization --out fits.csv --figure fits.png

One point per trial: eval metrics (loss, perplexity, accuracy, exact_match, error_rate) at
``--length-ratio`` x L_train for the PE as trained; any other name is an NTK metric at the end
of training (train kernel, whole model). Prints the fits table (a, b, c, 95% bootstrap
intervals over seeds, or over points with a single seed, R² of log y, n) and writes it as CSV
with ``--out``; ``--figure`` draws the data with the fits (rope_lab.analysis.plots.scaling).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from rope_lab.analysis import query as q
from rope_lab.analysis.fits import fits_table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scaling_fits.py", description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--metric", default="loss")
    parser.add_argument("--x", default="model.width", help="model.width (default) or n_params")
    parser.add_argument("--by", default="model.position.kind", help="comma-separated groups")
    parser.add_argument("--length-ratio", type=float, default=1.0)
    parser.add_argument("--offset", action="store_true", help="fit y = a x^-b + c")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--out", type=Path, help="CSV file for the fits table")
    parser.add_argument("--figure", type=Path, help="figure file (.png / .pdf)")
    args = parser.parse_args(argv)
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    try:
        from rope_lab.analysis import plots

        res = q.results_of(args.run_dirs)
        rows, where = plots.scaling_data(res, args.metric, length_ratio=args.length_ratio)
        q.check_columns(rows, [args.x, *by], "the fit")
        table = fits_table(
            rows, x=args.x, y=args.metric, by=by, offset=args.offset, n_boot=args.n_boot
        )
        if args.figure:
            import matplotlib

            matplotlib.use("Agg")
            plots.scaling(
                res,
                metric=args.metric,
                x=args.x,
                hue=by[0] if by else None,
                length_ratio=args.length_ratio,
                offset=args.offset,
                out=args.figure,
            )
    except (q.QueryError, pl.exceptions.PolarsError, OSError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"{args.metric} {where} vs {args.x}: y = a·x^(-b){' + c' if args.offset else ''}")
    with pl.Config(tbl_cols=-1, tbl_rows=-1, float_precision=3, tbl_width_chars=200):
        print(table.drop([c for c in ("c", "c_ci_low", "c_ci_high") if not args.offset]))
    if args.out:
        table.write_csv(args.out)
        print(f"wrote {args.out}")
    if args.figure:
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

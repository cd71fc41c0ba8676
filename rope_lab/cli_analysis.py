"""`rope-lab results` and `rope-lab plot`: query and plot the results of run directories.

Wire into the main parser with ``add_commands(subparsers)``; each command returns an exit
code (0 ok, 1 on a bad query / plot request, printed as one ``rope-lab: error:`` line).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from rope_lab.cli_args import non_negative_int, positive_float

__all__ = ["add_commands", "cmd_plot", "cmd_results", "load_table", "write_table"]

RESULT_TABLES: Final = ("eval", "ntk", "train", "trials")
FORMATS: Final = ("table", "csv", "parquet", "json")
PLOT_OPTIONS: Final = ("metric", "x", "hue", "col", "row")

_WHERE_HELP = (
    "keep rows matching a SQL condition, parsed by polars (pl.sql_expr; no Python is "
    "evaluated). Double-quote column names that contain dots, single-quote strings: "
    "--where '\"model.width\" = 64 AND length >= 32 AND method IN (''yarn'', ''ntk'')' "
    "(inside single shell quotes write '' for a quote). AND/OR/NOT, =, <>, <, >=, IN, "
    "BETWEEN, IS NULL and functions such as abs() work."
)


def _fail(message: str) -> int:
    print(f"rope-lab: error: {message}", file=sys.stderr)
    return 1


def one_line_errors(
    func: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Turn query, value, polars and file errors into one error line and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        import polars as pl

        from rope_lab.analysis.query import QueryError

        try:
            return func(args)
        except (QueryError, ValueError, pl.exceptions.PolarsError, OSError) as e:
            text = str(e).strip().splitlines()
            return _fail(text[0] if text else type(e).__name__)

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


# --------------------------------------------------------------------------------------------
# results


def load_table(run_dirs: list[Path], table: str, *, buckets: bool = False) -> Any:
    """The ``table`` of ``run_dirs`` joined with the trial config (a polars DataFrame)."""
    from rope_lab.analysis import query as q

    res = q.results_of(run_dirs)
    if table == "eval":
        return q.eval_table(res, whole_sequence=not buckets, mode="all", depths=None)
    if table == "ntk":
        return q.ntk_table(res, kernel=None)  # the NTK's rows and the NNGP's
    if table == "train":
        return res.with_config("train").collect()
    if table == "trials":
        return res.trials.collect()
    raise q.QueryError(f"unknown table {table!r}; tables are {', '.join(RESULT_TABLES)}")


def _split(cols: str) -> list[str]:
    return [c.strip() for c in cols.split(",") if c.strip()]


def _flat_lists(frame: Any) -> Any:
    """List columns as ``"[a, b]"`` strings (CSV cannot hold nested data)."""
    import polars as pl

    exprs = [
        pl.format("[{}]", pl.col(n).list.eval(pl.element().cast(pl.String)).list.join(", ")).alias(
            n
        )
        for n, dt in frame.schema.items()
        if isinstance(dt, pl.List)
    ]
    return frame.with_columns(exprs) if exprs else frame


def write_table(frame: Any, fmt: str, output: Path | None) -> str | None:
    """Write ``frame`` as csv / parquet / json to ``output``; return the text when no output."""
    if fmt == "parquet":
        if output is None:
            from rope_lab.analysis.query import QueryError

            raise QueryError("--format parquet needs --output FILE")
        frame.write_parquet(output)
        return None
    if fmt == "csv":
        text = _flat_lists(frame).write_csv(None)
    elif fmt == "json":
        text = frame.write_json(None)
    else:
        raise ValueError(fmt)
    if output is None:
        return text
    output.write_text(text)
    return None


# Columns of the readable table format, after the config columns that vary between rows.
TABLE_VIEW: Final = {
    "eval": ("label", "finetune_steps", "length", "position_bucket", "loss", "bits_per_byte",
             "accuracy", "exact_match"),
    "ntk": ("label", "kernel", "step", "probe_length", "group", "metric", "value"),
    "train": ("step", "loss", "grad_norm", "lr"),
    "trials": ("trial_id", "status", "wall_time_s", "n_params"),
}  # fmt: skip


def _readable(frame: Any, table: str, selected: bool) -> tuple[Any, int]:
    """A narrow view for the terminal: the config columns that vary (model.width, PE kind,
    seed, ...) then the table's main columns; returns it and the number of columns left out."""
    import polars as pl

    from rope_lab.analysis.query import MEASUREMENT_COLUMNS, RUN_COLUMNS, varying_columns
    from rope_lab.results import TABLE_SCHEMAS

    if selected:
        return frame, 0
    view = [c for c in TABLE_VIEW[table] if c in frame.columns]
    if "finetune_steps" in view and frame.get_column("finetune_steps").n_unique() <= 1:
        view.remove("finetune_steps")
    for sparse in ("position_bucket", "bits_per_byte"):  # null: whole sequences; not text
        if sparse in view and frame.get_column(sparse).null_count() == len(frame):
            view.remove(sparse)
    skip = set(TABLE_SCHEMAS[table]) | set(view) | MEASUREMENT_COLUMNS | {"length_ratio"}
    candidates = [
        c
        for c in frame.columns
        if c not in skip
        and (c not in RUN_COLUMNS or c == "train.seed")
        and not c.startswith("eval.")
        and c not in ("n_params", "n_params_non_embedding")
        and not isinstance(frame.schema[c], pl.List | pl.Datetime)
    ]
    shown = [*varying_columns(frame, candidates), *view] if len(frame) > 1 else view
    return frame.select(shown), frame.width - len(shown)


def check_output(path: Path | None, run_dirs: list[str], option: str = "--output") -> None:
    """TargetError (one line) when the output file `path` names a folder or lies inside the
    results the command reads (`results.targets.check_output_file`); None: stdout."""
    if path is None:
        return
    from rope_lab.results.scan import run_directories
    from rope_lab.results.targets import check_output_file

    check_output_file(path, run_directories(run_dirs), option)


def cmd_results(args: argparse.Namespace) -> int:
    """Print or write one results table of the run directories."""
    import polars as pl

    from rope_lab.analysis.query import check_columns, filter_where

    check_output(args.output, args.run_dirs)
    fmt = args.format
    if fmt is None:
        suffix = args.output.suffix.lstrip(".").lower() if args.output else ""
        fmt = suffix if suffix in ("csv", "parquet", "json") else "table"
    frame = load_table(list(args.run_dirs), args.table, buckets=args.buckets)
    if args.where:
        frame = filter_where(frame, args.where)
    selected = _split(args.select) if args.select else []
    if selected:
        check_columns(frame, selected, "--select")
        frame = frame.select(selected)
    if args.sort:
        keys = _split(args.sort)
        check_columns(frame, keys, "--sort")
        frame = frame.sort(keys, nulls_last=True)
    if fmt != "table":
        text = write_table(frame, fmt, args.output)
        if text is not None:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        else:
            print(f"wrote {frame.height} rows x {frame.width} columns to {args.output}")
        return 0
    shown, hidden = _readable(frame, args.table, bool(selected))
    width = max(shutil.get_terminal_size((160, 40)).columns, 100)
    with pl.Config(
        tbl_rows=args.limit if args.limit > 0 else -1,
        tbl_cols=-1,
        tbl_width_chars=width,
        fmt_str_lengths=80,
        tbl_hide_column_data_types=True,
    ):
        text = str(shown)
    if args.output:
        args.output.write_text(text + "\n")
        print(f"wrote {frame.height} rows to {args.output}")
    else:
        print(text)
    if hidden:
        print(
            f"({hidden} more columns not shown: --select COLS shows any of them, --format csv all)",
            file=sys.stderr,
        )
    return 0


# --------------------------------------------------------------------------------------------
# plot


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw one plot kind of the run directories and write it."""
    import matplotlib

    matplotlib.use("Agg")
    from rope_lab.analysis import plots
    from rope_lab.analysis.query import QueryError

    accepted = plots.plot_options(args.kind)
    settings = plots.plot_settings(args.kind, args.settings or [])  # checked before any work
    options: dict[str, Any] = {}
    for name in PLOT_OPTIONS:
        value = getattr(args, name)
        if value is None:
            continue
        if name not in accepted:
            takes = [f"--{o}" for o in PLOT_OPTIONS if o in accepted]
            raise QueryError(
                f"plot kind {args.kind!r} does not take --{name}; it takes "
                f"{', '.join(takes) or 'no options'} (and --out)"
            )
        options[name] = None if name in ("hue", "col", "row") and value.lower() == "none" else value
    both = sorted(set(options) & set(settings))
    if both:
        raise QueryError(f"--{both[0]} and --set {both[0]}=... both given; give one")
    options |= settings
    first = Path(args.run_dirs[0])
    default_dir = first.parent if first.is_file() else first
    if not first.exists():
        raise QueryError(f"not a run directory (no such path): {first}")
    folders = [d for d in args.run_dirs if not Path(d).is_file()]  # a file: coord-check's rows
    check_output(args.out, folders, "--out")
    out = args.out if args.out is not None else default_dir / "plots" / f"{args.kind}.png"
    plots.plot(args.kind, list(args.run_dirs), out=out, **options)
    print(f"wrote {out}")
    return 0


def cmd_loss_law(args: argparse.Namespace) -> int:
    """Fit the loss law per group of the run directories' trials and print or write the table."""
    import matplotlib

    matplotlib.use("Agg")

    from rope_lab.analysis.loss_law_table import loss_law_table
    from rope_lab.analysis.plots import scaling_data
    from rope_lab.analysis.plots.frames import eval_frame
    from rope_lab.analysis.query import loss_metric, whole_tables

    if args.by_ratio:
        from rope_lab.cli_ratio_laws import cmd_loss_law_by_ratio

        return cmd_loss_law_by_ratio(args)
    check_output(args.output, args.run_dirs)
    metric = args.metric or loss_metric(eval_frame(list(args.run_dirs)))
    rows, where = scaling_data(list(args.run_dirs), metric, length_ratio=args.length_ratio or 1.0)
    by = tuple(_split(args.by)) if args.by else ()
    table = loss_law_table(rows, n=args.n, y=metric, by=by, n_boot=args.n_boot)
    if args.format != "table":
        text = write_table(table, args.format, args.output)
        if text is not None:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        else:
            print(f"wrote {table.height} fits to {args.output}")
        return 0
    shown = [*by, "law", "loss", "d_unit", "alpha", "alpha_ci_low", "alpha_ci_high", "E", "A"]
    if "L(N, D)" in table.get_column("law").to_list():
        shown += ["beta", "beta_ci_low", "beta_ci_high", "B"]
    shown += ["n", "n_groups", "heldout_max_rel_error", "error"]
    with whole_tables(200, 60):
        text = (
            f"{metric} {where} vs {args.n}: L = E + A / N^alpha (+ B / D^beta, D in training "
            f"tokens)\n{table.select(shown)}"
        )
    if args.output:
        args.output.write_text(text + "\n")
        print(f"wrote {table.height} fits to {args.output}")
    else:
        print(text)
    return 0


class _PlotHelp(argparse.HelpFormatter):
    """Fills ``{kinds}`` in `rope-lab plot`'s help with the registered plot kinds when the help
    is shown, so that building the parser does not import rope_lab.analysis.plots."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text == "{options}":
            return _options_described(width, indent)
        return super()._fill_text(text.replace("{kinds}", _kinds_described()), width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        return text.replace("{kinds}", ", ".join(_kinds())) if text else text


def _kinds() -> tuple[str, ...]:
    from rope_lab.registry import PLOTS

    return PLOTS.names()


def _kinds_described() -> str:
    """``"extrapolation (metric vs evaluation length ...), positions (...)"``."""
    from rope_lab.analysis.plots import kind_help

    def lower_first(text: str) -> str:  # "Metric vs ..." -> "metric vs ...", "NTK ..." stays
        return text[:1].lower() + text[1:] if text[1:2].islower() else text

    return ", ".join(f"{k} ({lower_first(kind_help(k))})" for k in _kinds())


def _options_described(width: int, indent: str) -> str:
    """Each kind's keyword options with their types and defaults, one paragraph per kind."""
    from rope_lab.analysis.plots import option_help

    head = (
        "options of each kind (--set KEY=VALUE, repeatable; VALUE read as YAML: 3, 0.5, true, "
        "[a, b], none):"
    )
    lines = [textwrap.fill(head, width, initial_indent=indent, subsequent_indent=indent)]
    for kind in _kinds():
        text = f"{kind}: {option_help(kind)}"
        lines.append(textwrap.fill(text, width, initial_indent=indent + "  ",
                                   subsequent_indent=indent + "    "))  # fmt: skip
    return "\n".join(lines)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``results`` and ``plot`` subcommands to the `rope-lab` parser."""
    p = subparsers.add_parser(
        "results",
        help="print or export a results table (eval, ntk, train, trials) of run directories",
        description="One table of one or more run directories, joined with each trial's "
        "flattened config (columns such as model.width, model.position.kind, train.length). "
        "The eval table holds whole-sequence rows with length_ratio = length / train.length "
        "and a label column (alibi, rope, rope/yarn x4, ...). The readable table format shows "
        "the config columns that vary and the main columns (--select for others); csv, "
        "parquet and json export every column.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--table", choices=RESULT_TABLES, default="eval", help="default: eval")
    p.add_argument("--where", metavar="EXPR", help=_WHERE_HELP)
    p.add_argument("--select", metavar="COLS", help="comma-separated columns to keep, in order")
    p.add_argument("--sort", metavar="COLS", help="comma-separated columns to sort by")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table (readable, default) or csv / parquet / json; default from --output's extension",
    )
    p.add_argument("--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.add_argument("--buckets", action="store_true", help="eval: also the per-position-bucket rows")
    p.add_argument(
        "--limit",
        type=non_negative_int,
        default=60,
        help="table format: rows shown (default 60, 0 = all)",
    )
    p.set_defaults(func=one_line_errors(cmd_results))

    p = subparsers.add_parser(
        "loss-law",
        help="fit the loss law L(N[, D]) = E + A/N^alpha (+ B/D^beta) to run directories",
        description="One fit per group of --by of the trials' loss (--metric) at --length-ratio "
        "x L_train (the PE as trained) against their non-embedding parameters N (and training "
        "tokens D, in the task's tokens, when there are at least 3 token counts; the table's "
        "loss and d_unit columns say which): Huber loss on log residuals, multi-start "
        "L-BFGS (Hoffmann et al. 2022, approach 3), bootstrap CIs over seeds, and the relative "
        "error of predicting the largest N from the others. `rope-lab plot loss-law` draws it.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--by", metavar="COLS", default="task.name,corpus,model.position.kind",
                   help="comma-separated columns, one fit per group (default: task.name,"
                   "corpus,model.position.kind; corpus: a text task's corpus; '' for one "
                   "fit)")  # fmt: skip
    p.add_argument("--n", default="n_params_non_embedding", metavar="COL",
                   help="size column (default n_params_non_embedding; or n_params)")  # fmt: skip
    p.add_argument("--length-ratio", type=positive_float, help="default 1 (L_train)")
    p.add_argument("--by-ratio", action="store_true", help="a law per evaluated length ratio "
                   "and label, gap exponents G = loss(r) - loss(1x) = g N^gamma, held-out "
                   "errors of separate and joint laws (rope_lab.analysis.ratio_laws)")  # fmt: skip
    p.add_argument("--metric", choices=("loss", "bits_per_byte"),
                   help="L: loss (nats per token) or bits_per_byte (text tasks); default "
                   "bits_per_byte when every trial has it, else loss")  # fmt: skip
    p.add_argument("--n-boot", type=non_negative_int, default=200,
                   help="bootstrap refits (default 200; 0: no intervals)")  # fmt: skip
    p.add_argument("--law-boot", type=non_negative_int, default=0, help="--by-ratio: refits "
                   "per ratio's law for its intervals (default 0: none; ~10 ms each)")  # fmt: skip
    p.add_argument("--format", choices=FORMATS, default="table", help="table, csv, parquet, json")
    p.add_argument("--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.set_defaults(func=one_line_errors(cmd_loss_law))

    p = subparsers.add_parser(
        "plot",
        help="draw a figure of run directories (rope-lab plot --help lists the kinds)",
        description="Draw one figure of one or more run directories and write it (PNG or "
        "PDF by --out's extension; default RUN_DIR/plots/KIND.png). Kinds: {kinds}. "
        "--hue/--col/--row none: off. --set KEY=VALUE passes any other option of the kind "
        "(listed below).",
        epilog="{options}",
        formatter_class=_PlotHelp,
    )
    p.add_argument("kind", metavar="KIND", help="one of: {kinds}")
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--out", type=Path, metavar="FILE", help="figure file (.png or .pdf)")
    p.add_argument("--metric", help="y: accuracy, loss, perplexity, exact_match, error_rate, "
                   "bits_per_byte (text tasks), "
                   "or an NTK metric (distance_from_init, ...); default: bits_per_byte for "
                   "language models on text (lm_text, lm_tokens) where every row has it, else "
                   "loss for language-model tasks, accuracy otherwise")  # fmt: skip
    p.add_argument("--x", help="x column (extrapolation: length or length_ratio; "
                   "scaling / ntk-drift: model.width or n_params)")  # fmt: skip
    p.add_argument(
        "--hue", help="colour column (default label; model.width for ntk-drift; none: one colour)"
    )
    p.add_argument("--col", help="facet column (default: model.width when it varies)")
    p.add_argument("--row", help="facet rows (default: train.length / task.name if varying)")
    p.add_argument("--set", action="append", dest="settings", metavar="KEY=VALUE",
                   help="any keyword option of the kind (repeatable; VALUE read as YAML, "
                   "checked against the option's type): --set n_boot=50 --set "
                   "'metrics=[velocity, relative_change]'")  # fmt: skip
    p.set_defaults(func=one_line_errors(cmd_plot))

"""`rope-lab reference-vectors --out DIR`: RoPE reference tables for other engines."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_reference_vectors(args: argparse.Namespace) -> int:
    from rope_lab.config import ConfigError
    from rope_lab.reference_vectors import TABLES, write

    try:
        methods = tuple(args.methods.split(",")) if args.methods else None
        out = write(args.out, overwrite=args.overwrite, methods=methods)
    except (FileExistsError, ValueError) as err:
        raise ConfigError(str(err)) from None
    sizes = {p.name: p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    print(f"wrote {out}: {', '.join(f'{t.file}' for t in TABLES.values())}, model/, "
          f"README.md, manifest.json ({sum(sizes.values()) / 1e6:.1f} MB)")  # fmt: skip
    return 0


def add_command(sub) -> None:
    """Register `reference-vectors` on the `rope-lab` subparsers."""
    p = sub.add_parser(
        "reference-vectors",
        help="write RoPE reference tables (frequencies, cos/sin, a tiny model's logits)",
        description="Write Parquet tables of inverse frequencies, attention factors, cos/sin at "
        "chosen positions and a tiny model's logits under every registered RoPE scaling method "
        "and a grid of edge-case parameters, with the model's weights as a Hugging Face "
        "checkpoint, a README of every column and a manifest, for checking other engines.",
    )
    p.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT even if it is not empty")
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated scaling methods (default: every registered one)",
    )
    p.set_defaults(func=_cmd_reference_vectors)

"""`rope-lab corpus prepare`: tokenize text sources into a corpus folder for `lm_tokens`."""

from __future__ import annotations

import argparse
import sys

from rope_lab.cli_args import fraction


def _cmd_prepare(args: argparse.Namespace) -> int:
    from rope_lab.corpus import CorpusError, prepare

    try:
        done = prepare(
            args.sources,
            args.out,
            args.tokenizer,
            eval_sources=args.eval,
            eval_fraction=args.eval_fraction,
            progress=not args.quiet,
            overwrite=args.overwrite,
        )
    except CorpusError as err:
        print(f"rope-lab: error: {err}", file=sys.stderr)
        return 1
    for folder in done.removed:
        print(f"removed {folder}: the staging folder of a killed corpus prepare", file=sys.stderr)
    m = done.meta
    if done.status == "unchanged":
        print(f"{done.folder}: up to date (same sources and tokenizer); nothing written")
    else:
        print(
            f"{done.folder}: {done.status}: vocabulary {m['vocab_size']} ({m['dtype']}), train "
            f"{m['train_tokens']:,} tokens / {m['train_bytes']:,} bytes ({m['train_documents']} "
            f"documents), eval {m['eval_tokens']:,} tokens / {m['eval_bytes']:,} bytes "
            f"({m['eval_documents']} documents)"
        )
    print(
        f"use it with task: {{name: lm_tokens, vocab_size: {m['vocab_size']}, params: "
        f"{{path: {done.folder}}}}}"
    )
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Add `corpus prepare` to the `rope-lab` parser."""
    corpus = sub.add_parser("corpus", help="prepare tokenized corpora for the lm_tokens task")
    csub = corpus.add_subparsers(dest="corpus_command", required=True, metavar="COMMAND")
    p = csub.add_parser(
        "prepare",
        help="tokenize text files, folders or a built-in corpus (builtin:NAME) into DIR",
        description="Tokenize SOURCEs (text files, folders of them, builtin:python-docs, "
        "builtin:python-source, builtin:unicode-data) into "
        "DIR/train.bin and DIR/eval.bin (little-endian uint16 or uint32 token ids), "
        "DIR/tokenizer.json and DIR/meta.json. Documents (files; built-in pages; a lone "
        "file's blank-line sections) go whole to one split. Rerunning with the same inputs "
        "writes nothing.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE")
    p.add_argument("--out", required=True, help="the corpus folder DIR")
    p.add_argument(
        "--tokenizer",
        required=True,
        help="'bytes', 'bpe:N' (a byte-level BPE of N tokens trained on the training text) or "
        "a tokenizer.json path",
    )
    split = p.add_mutually_exclusive_group()
    split.add_argument("--eval", nargs="+", metavar="SOURCE", help="held-out sources")
    split.add_argument(
        "--eval-fraction",
        type=fraction,
        help="hold out the last documents holding this fraction of the text (default 0.1)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a corpus DIR already holds that other sources or another tokenizer made",
    )
    p.set_defaults(func=_cmd_prepare)

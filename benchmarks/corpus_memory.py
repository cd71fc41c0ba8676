"""Peak memory of `corpus prepare` on one long line of text (no blank line, so one document):
documents handed to the tokenizer in pieces of `sources.PIECE_CHARS` characters against the
same prepare with pieces of unbounded size (the whole document at once), per tokenizer. Each
prepare runs in a fresh Python process, which reports its own peak resident set size (Linux's
VmHWM: ru_maxrss would carry the parent's peak over from the fork).

    .venv/bin/python -m benchmarks.corpus_memory [--mb 6] [--tokenizers bytes bpe:300]
        [--checkout PATH] [--no-record]

``--checkout`` runs the children on another rope_lab checkout (e.g. an older commit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import markdown_table, record

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from rope_lab.corpus import sources
from rope_lab.corpus.prepare import prepare
src, held, out, tokenizer, whole = sys.argv[1:6]
if whole == "1":
    sources.PIECE_CHARS = 1 << 62
start = time.perf_counter()
done = prepare([src], out, tokenizer, eval_sources=[held], progress=False)
seconds = time.perf_counter() - start
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"peak": peak, "seconds": seconds, "tokens": done.meta["train_tokens"]}))
"""


def long_line(path: Path, megabytes: float, seed: int = 0) -> int:
    """Write one line of random words (a few thousand distinct ones) of about ``megabytes``
    MB; its size in bytes."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(3000)]
    words = np.array(vocab)[rng.integers(0, len(vocab), int(megabytes * 1e6 / 5.5))]
    path.write_text(" ".join(words.tolist()) + "\n")
    return path.stat().st_size


def measure(folder: Path, tokenizer: str, whole: bool, checkout: Path) -> dict[str, float]:
    """Peak RSS (bytes), seconds and train tokens of one prepare in a fresh process."""
    out = folder / f"out-{tokenizer.replace(':', '_')}-{int(whole)}-{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [str(folder / "line.txt"), str(folder / "held.txt"), str(out), tokenizer]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv, "1" if whole else "0"],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Measure, print, and append to RESULTS.md unless --no-record."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=6.0)
    parser.add_argument("--tokenizers", nargs="+", default=["bytes", "bpe:300"])
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp())
    size = long_line(folder / "line.txt", args.mb)
    (folder / "held.txt").write_text("a held-out document\n")
    rows = []
    for tokenizer in args.tokenizers:
        for whole in (True, False):
            m = measure(folder, tokenizer, whole, args.checkout)
            label = "whole document" if whole else "pieces (PIECE_CHARS)"
            rows.append([tokenizer, label, m["peak"] / 2**20, m["seconds"], m["tokens"]])
    table = markdown_table(["tokenizer", "to the tokenizer", "peak RSS MiB", "s", "tokens"], rows)
    notes = (
        f"One line of random words, {size / 1e6:.1f} MB, no blank line (one document), --eval "
        "a one-line file; each prepare in a fresh process (peak = its VmHWM, including the "
        "interpreter and the imports, ~35 MiB); checkout "
        f"{args.checkout}. 'whole document' sets PIECE_CHARS past the text's length."
    )
    if args.no_record:
        print(table)
        print(notes)
    else:
        record("corpus prepare: peak memory on one long line", table, notes=notes)


if __name__ == "__main__":
    main()

"""Token corpora: `corpus prepare` throughput (MB of text per second) for the bytes tokenizer
and a byte-level BPE on builtin:python-docs, and the training step of `lm_tokens` (windows
gathered on the host from a memory-mapped file, then device_put) against `lm_text` (the
whole text on the device, windows sampled inside the step), same model, interleaved.

    .venv/bin/python -m benchmarks.corpus [--steps 60] [--repeats 3] [--no-record]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import interleaved, markdown_table, record


def prepare_rates(folder: Path, specs: list[str]) -> list[list[object]]:
    """[tokenizer, MB of text, seconds, MB/s, tokens] of one prepare per tokenizer spec."""
    from rope_lab.corpus import prepare

    rows = []
    for spec in specs:
        start = time.perf_counter()
        done = prepare(
            ["builtin:python-docs"], folder / spec.replace(":", "_"), spec, progress=False
        )
        seconds = time.perf_counter() - start
        mb = (done.meta["train_bytes"] + done.meta["eval_bytes"]) / 1e6
        tokens = done.meta["train_tokens"] + done.meta["eval_tokens"]
        rows.append([spec, mb, seconds, mb / seconds, tokens])
    return rows


def step_seconds(cfg, steps: int) -> float:
    """Median seconds per training step after the first logging window (compilation)."""
    from rope_lab.trial.train import train

    history = train(cfg, steps=steps).history
    rates = [r["tokens_per_s"] for r in history[1:]]
    return cfg.train.batch_size * cfg.train.length / statistics.median(rates)


def main() -> None:
    """Measure, print, and append to RESULTS.md unless --no-record."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from rope_lab.config import replace
    from tests.helpers import tiny_trial

    folder = Path(tempfile.mkdtemp())
    prep = prepare_rates(folder, ["bytes", "bpe:4096", "bpe:16384"])
    base = replace(
        tiny_trial("rope", width=args.width, depth=2, head_dim=32, length=args.length),
        **{"train.batch_size": args.batch, "train.log_every": 10, "task.vocab_size": 256},
    )
    cfgs = {
        "lm_text (in memory)": replace(
            base, **{"task.name": "lm_text", "task.params": (("path", "builtin:python-docs"),)}
        ),
        "lm_tokens (memmap)": replace(
            base, **{"task.name": "lm_tokens", "task.params": (("path", str(folder / "bytes")),)}
        ),
    }
    times = interleaved(
        {name: (lambda c=c: step_seconds(c, args.steps)) for name, c in cfgs.items()},
        repeats=args.repeats,
        warmup=0,
    )
    ref = statistics.median(times["lm_text (in memory)"])
    step_rows = [
        [name, statistics.median(t) * 1e3, min(t) * 1e3, statistics.median(t) / ref]
        for name, t in times.items()
    ]
    table = (
        markdown_table(["tokenizer", "MB of text", "s", "MB/s", "tokens"], prep)
        + "\n\n"
        + markdown_table(["task", "ms / step (median)", "ms (min)", "/ lm_text"], step_rows)
    )
    notes = (
        f"prepare: builtin:python-docs, one process, bpe:N includes training the BPE. Steps: "
        f"width {args.width}, depth 2, L {args.length}, batch {args.batch}, fp32, RoPE; "
        f"{args.steps} steps per run, median step over the logging windows after the first; "
        f"{args.repeats} interleaved runs. Both read the same python-docs bytes (the memmap "
        "is in the page cache after the first run)."
    )
    if args.no_record:
        print(table)
        print(notes)
    else:
        record(
            "Token corpora: prepare throughput, memmapped vs in-memory windows", table, notes=notes
        )


if __name__ == "__main__":
    main()

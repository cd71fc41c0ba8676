"""Inference cost: one cached decoding step against a forward over the whole prefix, by context.

At each context length C (tokens already in the sequence), two ways to get the next token's
logits: `decode_step` on a cache of capacity C + 1 (`rope_lab.model.decode`), and the teacher-forced
forward over all C + 1 tokens that a model without a cache must run. Reported: median seconds
of each (interleaved, same process, compiled first), their ratio, and the cache's bytes
(`KVCache.nbytes`: keys, values and slot bookkeeping) against the model's parameter bytes. A
sliding-window layout (`--window W` on every other layer) shows the ring buffers' saving.

The model: width 128, depth 4, head_dim 32, vocabulary 256, float32, batch 1.

Run: `python -m benchmarks.decode [--lengths 128 512 2048] [--kind rope] [--window 0]
[--repeats 5] [--no-record]`.
"""

from __future__ import annotations

import argparse

WIDTH, DEPTH, HEAD_DIM, VOCAB = 128, 4, 32, 256


def run(lengths: list[int], kind: str, window: int, repeats: int) -> list[list[object]]:
    """One row per context length: seconds per cached step and per full forward, their ratio,
    cache MB and cache / parameter bytes."""
    import jax

    from benchmarks.common import median
    from rope_lab.config import LayerConfig, ModelConfig, PositionConfig
    from rope_lab.model.decode import prefill
    from rope_lab.model.transformer import Transformer, count_params

    layers = (LayerConfig(window=window), LayerConfig()) if window else ()
    cfg = ModelConfig(
        width=WIDTH, depth=DEPTH, head_dim=HEAD_DIM, position=PositionConfig(kind=kind),
        layers=layers,
    )  # fmt: skip
    rows: list[list[object]] = []
    for context in lengths:
        model = Transformer(
            cfg, VOCAB, train_length=context, max_length=context + 1, key=jax.random.PRNGKey(0)
        )
        tokens = jax.random.randint(jax.random.PRNGKey(1), (context + 1,), 0, VOCAB)
        _, cache = jax.jit(prefill, static_argnums=2)(model, tokens[:context], context + 1)
        times = _times(model, cache, tokens, repeats)
        cached, full = median(times["cached step"]), median(times["full forward"])
        params = 4 * count_params(model)
        rows.append(
            [context, 1e3 * cached, 1e3 * full, full / cached, cache.nbytes() / 2**20,
             cache.nbytes() / params]
        )  # fmt: skip
    return rows


def _times(model, cache, tokens, repeats: int) -> dict[str, list[float]]:
    """Interleaved seconds of one cached step after `cache` and one forward over `tokens`."""
    import equinox as eqx
    import jax

    from benchmarks.common import interleaved, time_call
    from rope_lab.model.decode import decode_step

    step = eqx.filter_jit(decode_step)
    forward = eqx.filter_jit(lambda m, t: m(t)[-1])
    sync = jax.block_until_ready
    last = tokens[-1]
    return interleaved(
        {
            "cached step": lambda: time_call(lambda: step(model, cache, last), sync=sync),
            "full forward": lambda: time_call(lambda: forward(model, tokens), sync=sync),
        },
        repeats=repeats,
    )


def main() -> None:
    """Parse arguments, measure, print and record."""
    from benchmarks.common import markdown_table, record

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--kind", default="rope")
    parser.add_argument("--window", type=int, default=0, help="window of every other layer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    rows = run(args.lengths, args.kind, args.window, args.repeats)
    header = ["context", "cached step ms", "full forward ms", "forward / step", "cache MB",
              "cache / params"]  # fmt: skip
    table = markdown_table(header, rows)
    layout = f", window {args.window} on every other layer" if args.window else ""
    title = f"Decoding: cached step vs full forward ({args.kind}{layout})"
    if args.no_record:
        print(table)
    else:
        record(title, table, notes=__doc__.split("\n\n")[1].replace("\n", " "))


if __name__ == "__main__":
    main()

"""Eval rows of attention statistics (`eval.attention_stats`; `mode` "attention"): per layer and
evaluated length, from an extra forward of the length's eval batches by the reference path
(`rope_lab.model.attention_stats`).

Long format, one row per (layer, head) plus one per layer with `head` null that aggregates the
heads: `first_token_mass`, `sink_mass` and `gate_mean` their mean, `fox_window` their median.
Each statistic is averaged over the queries or tokens of a sequence, then over the sequences
of every eval batch (a sequence with no scored token, a text's padding row, left out);
`fox_window` = 1 / (-m_h) tokens, the e-folding length of a head's forget gate with m_h its
mean log forget gate. A column the variant does not have is null (`sink_mass` but for
`sinks`, `gate_mean` but for the gated variants, `fox_window` but for `fox`, `fox_pro`).

Memory: the pass holds what the reference forward holds (its largest query block against
its key prefix); the batch runs in the largest sub-batches whose reference forward fits
`eval.memory_budget_mb` (`model.memory.forward_bytes`), and a length at which one sequence
alone does not fit gets no rows (past the reference path's range, thousands of tokens on a
small model, its logits would outgrow the budget).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from rope_lab.config import TrialConfig
from rope_lab.model.memory import forward_bytes
from rope_lab.model.transformer import Transformer
from rope_lab.tasks import Batch

ATTENTION = "attention"  # the rows' `mode`
COLUMNS = ("first_token_mass", "sink_mass", "gate_mean", "fox_window")


def reference_sequences(cfg: TrialConfig, length: int, sets: int = 1) -> int:
    """The largest divisor of `eval.batch_size` whose reference forward at `length` fits
    `eval.memory_budget_mb`; 0 when one sequence alone does not."""
    reference = dataclasses.replace(cfg.model, attention="reference")
    per_sequence = forward_bytes(reference, cfg.task.vocab_size, length, sets)
    budget = cfg.eval.memory_budget_mb * 2**20
    batch = cfg.eval.batch_size
    fits = [b for b in range(1, batch + 1) if batch % b == 0 and b * per_sequence <= budget]
    return max(fits, default=0)


def attention_rows(
    model: Transformer,
    inputs: Iterable[tuple[Batch, Any]],
    cfg: TrialConfig,
    length: int,
    labels: dict,
    sets: int = 1,
) -> list[dict]:
    """The rows of one length (module docstring) from its eval batches `inputs`, each a
    (B, L) batch and its (B, L) positions; none when a sequence does not fit the budget."""
    from rope_lab.model.attention_stats import layer_statistics

    chunk = reference_sequences(cfg, length, sets)
    if not chunk:
        return []
    sums: dict[str, np.ndarray] = {}
    n = 0.0
    for batch, positions in inputs:
        for start in range(0, batch.tokens.shape[0], chunk):
            part = slice(start, start + chunk)
            stats = layer_statistics(model, batch.tokens[part], positions[part])
            real = np.asarray(batch.mask[part]).any(axis=1).astype(np.float64)  # (b,)
            n += real.sum()
            for name, value in stats.items():  # (depth, b, H)
                total = np.einsum("lbh,b->lh", np.asarray(value, np.float64), real)
                sums[name] = sums.get(name, 0.0) + total
    means = {name: total / max(n, 1.0) for name, total in sums.items()}
    return statistic_rows(means, length, labels)


def statistic_rows(means: dict[str, np.ndarray], length: int, labels: dict) -> list[dict]:
    """Rows of per-(layer, head) means (each (depth, H)): `log_forget` becomes `fox_window`;
    one row per layer with `head` null aggregating its heads, then one per head."""
    per_head = {
        "first_token_mass": means.get("first_token_mass"),
        "sink_mass": means.get("sink_mass"),
        "gate_mean": means.get("gate_mean"),
        "fox_window": None if "log_forget" not in means else 1.0 / -means["log_forget"],
    }
    present = {name: value for name, value in per_head.items() if value is not None}
    depth, heads = next(iter(present.values())).shape
    base = {**labels, "length": length, "position_bucket": None, "mode": ATTENTION}
    rows: list[dict] = []
    for layer in range(depth):
        whole: dict[str, float | None] = dict.fromkeys(COLUMNS)
        for name, value in present.items():
            pool = np.median if name == "fox_window" else np.mean
            whole[name] = float(pool(value[layer]))
        rows.append({**base, "layer": layer, "head": None, **whole})
        for head in range(heads):
            cells: dict[str, float | None] = dict.fromkeys(COLUMNS)
            cells.update({name: float(value[layer, head]) for name, value in present.items()})
            rows.append({**base, "layer": layer, "head": head, **cells})
    return rows

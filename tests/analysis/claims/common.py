"""Hand-made eval and NTK rows with known answers for the claims tests."""

from __future__ import annotations

from typing import Any

import polars as pl

from rope_lab.analysis.claims import Evidence

L = 16  # train.length of every trial


def trial_rows(
    kind: str,
    seed: int,
    loss: dict[float, float],
    *,
    task: str = "copy",
    method: str | None = None,
    factor: float = 1.0,
    finetune: int = 0,
    accuracy: dict[float, float] | None = None,
    config: dict[str, Any] | None = None,
    buckets: dict[float, list[float]] | None = None,
) -> list[dict[str, Any]]:
    """Whole-sequence eval rows of one trial at ratio -> loss (and accuracy), as trained unless
    ``method`` names a scaling; ``buckets``: ratio -> per-bucket losses (equal buckets)."""
    rope = kind == "rope"
    trial = f"{task}-{kind}-{seed}-{sorted((config or {}).items())}"
    base = {
        "trial_id": trial,
        "step": 100,
        "method": method or ("default" if rope else "none"),
        "factor": factor,
        "finetune_steps": finetune,
        "status": "done",
        "train.seed": seed,
        "train.length": L,
        "task.name": task,
        "model.position.kind": kind,
        "model.position.rope.scaling": "default" if rope else None,
        "model.position.rope.factor": 1.0 if rope else None,
        **(config or {}),
    }
    rows = []
    for ratio, value in loss.items():
        acc = (accuracy or {}).get(ratio, 1.0)
        rows.append(
            {**base, "length": int(ratio * L), "loss": value, "accuracy": acc,
             "position_bucket": None}
        )  # fmt: skip
        for i, b in enumerate((buckets or {}).get(ratio, [])):
            n = len(buckets[ratio])  # type: ignore[index]
            start = int(i * ratio * L / n)
            rows.append(
                {**base, "length": int(ratio * L), "loss": b, "accuracy": acc,
                 "position_bucket": start}
            )  # fmt: skip
    return rows


def evidence(
    rows: list[dict[str, Any]], ntk: list[dict[str, Any]] | None = None, **kw: Any
) -> Evidence:
    """Evidence from hand-made rows (defaults: min_seeds 2, 400 resamples)."""
    frame = pl.DataFrame(rows, infer_schema_length=None)
    ntk_frame = pl.DataFrame(ntk, infer_schema_length=None) if ntk else None
    return Evidence.from_frames(frame, ntk_frame, **{"n_boot": 400, **kw})


def by_scope(verdicts: list) -> dict[str, Any]:
    """Verdicts keyed by scope (one claim's)."""
    return {v.scope: v for v in verdicts}


def decode_evidence(
    rows: list[dict[str, Any]], decode: list[dict[str, Any]], **kw: Any
) -> Evidence:
    """Evidence with teacher-forced rows and decode rows (mode "decode", with a protocol)."""
    frame = pl.DataFrame(rows, infer_schema_length=None)
    decoded = pl.DataFrame(decode, infer_schema_length=None)
    return Evidence.from_frames(frame, None, decoded, **{"n_boot": 400, **kw})

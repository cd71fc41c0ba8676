"""Text of the figures: axis labels of columns, facet titles and the notes under a title."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import polars as pl

NAMES: Final[Mapping[str, str]] = {
    "length": "evaluation length (tokens)",
    "length_ratio": "evaluation length / L_train",
    "probe_length": "probe length (tokens)",
    "position": "position in sequence (tokens)",
    "step": "training step",
    "loss": "loss (nats / scored token)",
    "perplexity": "perplexity",
    "accuracy": "accuracy",
    "exact_match": "exact match",
    "error_rate": "error rate (1 − accuracy)",
    "bits_per_byte": "bits per byte (scored text)",
    "first_token_mass": "attention on the first token",
    "sink_mass": "attention on the sink logit",
    "gate_mean": "mean output gate",
    "fox_window": "forget-gate window (tokens)",
    "layer": "layer",
    "model.width": "width (d_model)",
    "n_params": "parameters",
    "n_params_non_embedding": "non-embedding parameters",
    "tokens_seen": "training tokens",
    "train.length": "L_train",
    "task.name": "task",
    "model.position.kind": "position encoding",
    "model.parametrization": "parametrization",
    "model.depth": "depth",
    "label": "PE / RoPE scaling",
    "distance_from_init": "distance from init",
    "relative_change": "relative change",
    "velocity": "velocity",
    "k_cross_cos_mean": "mean cos(K) long probe × train",
    "k_train_cos_mean": "mean cos(K) train × train",
    "cross_train_cos_ratio": "cross / train kernel cosine",
    "effective_rank": "effective rank",
}
SHORT: Final[Mapping[str, str]] = {
    "model.width": "width",
    "train.length": "L_train",
    "task.name": "task",
    "model.position.kind": "PE",
    "model.parametrization": "param.",
    "model.depth": "depth",
}


def name_of(col: str) -> str:
    """Axis label of a column."""
    return NAMES.get(col, col.rsplit(".", 1)[-1].replace("_", " "))


def format_value(value: Any) -> str:
    """A value as a legend or title shows it (floats with ``:g``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def facet_title(col: str, value: Any) -> str:
    """Title part of a facet: short column name and value (``width 64``)."""
    return f"{SHORT.get(col, col)} {format_value(value)}"


def spread_note(n_seeds: int) -> str:
    """What a line and its band are, given the seeds per configuration."""
    if n_seeds > 1:
        return f"mean over {n_seeds} seeds, band ± 1 s.e."
    return "one seed per configuration"


def constant_note(frame: pl.DataFrame, cols: Sequence[str]) -> str:
    """``"task passkey, L_train 32"``: the columns of ``cols`` that hold one value."""
    parts = []
    for c in cols:
        if c in frame.columns:
            values = frame.get_column(c).unique().drop_nulls().to_list()
            if len(values) == 1:
                parts.append(f"{SHORT.get(c, c)} {format_value(values[0])}")
    return ", ".join(parts)


def ci_text(ci: tuple[float, float], n: int, n_groups: int, fmt: str = ".2f") -> str:
    """`` [lo, hi]`` when a bootstrap interval means something, else why not."""
    if n <= 2:
        return f" (n={n}: exact, no CI)"
    if n_groups < 3 or not ci[1] > ci[0]:
        return f" (n={n}, no CI)"
    return f" [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def subtitle(*parts: str) -> str:
    """The non-empty ``parts`` joined by middle dots."""
    return " · ".join(p for p in parts if p)

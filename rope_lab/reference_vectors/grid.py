"""The cases every table is keyed by: `Case` (one set of arguments of rope_lab's `inv_freq`, with
its Hugging Face form), `grid_cases` (every registered scaling method over `parameters.py`'s
grid) and `model_cases` (the tiny model's scaling per method).

The grid is built from the registry and the methods' capabilities, never from a list of names:
every method gets the base configurations; a length-dependent method also a sweep of seq_len
below, at and above the training length; a method whose dataclass has a field (`beta_fast`,
`mscale`, `attention_factor`, `low_freq_factor`, `partial_rotary_factor`, ...) the edge cases
of that field (`FIELD_CASES`); a required field without a default takes `REQUIRED_EXAMPLES`'s
value (a new method with a new required field fails naming it).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rope_lab.hf.config import CheckpointError, hf_rope_parameters
from rope_lab.model.rope import inv_freq
from rope_lab.reference_vectors.parameters import (
    BASE,
    FIELD_CASES,
    LOGIT_LENGTHS,
    MODEL,
    MODEL_FACTOR,
    MODEL_THETA,
    PARTIAL,
    REQUIRED_EXAMPLES,
    TRAIN_LENGTH,
)
from rope_lab.registry import SCALINGS


@dataclass(frozen=True)
class Case:
    """One set of arguments of `rope_lab.model.rope.inv_freq` (and its HF form)."""

    case_id: str
    group: str  # "grid" or "model" (the tiny model's scaling at one length)
    method: str
    rotary_dim: int
    head_dim: int
    theta: float
    factor: float
    original_length: int
    seq_len: int | None
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def frequencies(self) -> tuple[np.ndarray, float]:
        """(rotary_dim // 2,) float32 inverse frequencies and the attention factor."""
        return inv_freq(
            self.method,
            self.rotary_dim,
            theta=self.theta,
            factor=self.factor,
            original_length=self.original_length,
            seq_len=self.seq_len,
            **self.params,
        )

    def hf(self) -> tuple[dict[str, Any] | None, str]:
        """(the Hugging Face config fields that reproduce the case, or None; why not)."""
        proportional = "partial_rotary_factor" in self.params
        try:
            rope, max_pos = hf_rope_parameters(
                self.method,
                theta=self.theta,
                factor=self.factor,
                train_length=self.original_length,
                params=self.params,
                partial_rotary_factor=1.0 if proportional else self.rotary_dim / self.head_dim,
            )
        except CheckpointError as err:
            return None, str(err)
        return {
            "head_dim": self.head_dim,
            "max_position_embeddings": max_pos,
            "rope_parameters": rope,
        }, ""

    def record(self) -> dict[str, Any]:
        """The case as plain JSON values."""
        out = dataclasses.asdict(self)
        out["params"] = _plain(self.params)
        return out


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively (for JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _fields(method: str) -> list[dataclasses.Field]:
    return list(dataclasses.fields(SCALINGS[method]))


def _required(method: str, rotary_dim: int, factor: float) -> dict[str, Any]:
    """Example values of the method's required fields (`REQUIRED_EXAMPLES`)."""
    out = {}
    for f in _fields(method):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if f.name not in REQUIRED_EXAMPLES:
                raise ValueError(
                    f"scaling {method!r}: required field {f.name!r} has no example value; add "
                    "one to rope_lab.reference_vectors.REQUIRED_EXAMPLES"
                )
            out[f.name] = REQUIRED_EXAMPLES[f.name](rotary_dim, factor)
    return out


def _methods(methods: tuple[str, ...] | None) -> tuple[str, ...]:
    """`methods` checked against the registry (ValueError names an unknown one); None: all."""
    if methods is None:
        return SCALINGS.names()
    for name in methods:
        if name not in SCALINGS:
            raise ValueError(SCALINGS.unknown(name))
    return tuple(methods)


def _seq_lens(length: int, factor: float) -> tuple[int | None, ...]:
    """seq_len of a length-dependent method: unset, below, at, just above and beyond L."""
    beyond = max(1, round(factor * length))
    lens = (None, length // 2, length - 1, length, length + 1, 2 * length, int(3.7 * length))
    return tuple(dict.fromkeys((*lens, beyond, 4 * beyond)))


def grid_cases(methods: tuple[str, ...] | None = None) -> list[Case]:
    """The parameter grid of every registered scaling method, or of `methods` (see the module
    docstring)."""
    out: list[Case] = []
    for method in _methods(methods):
        cls = SCALINGS[method]
        names = {f.name for f in _fields(method)}
        rows: list[tuple[int, int, float, float, int, int | None, dict[str, Any], str]] = []
        for d, theta, factor, length, note in BASE:
            seqs = _seq_lens(length, factor) if cls.length_dependent else (None,)
            for seq in seqs:
                rows.append((d, d, theta, factor, length, seq, {}, note))
        if "partial_rotary_factor" not in names:
            for head, d in PARTIAL:
                note = f"partial rotary {d}/{head}"
                seq = 2 * 2048 if cls.length_dependent else None
                rows.append((head, d, 10000.0, 4.0, 2048, seq, {}, note))
        for name, edge in FIELD_CASES.items():
            if name not in names:
                continue
            for d, theta, factor, length, params, note in edge:
                if not set(params) <= names:
                    continue
                seq = 2 * length if cls.length_dependent else None
                rows.append((d, d, theta, factor, length, seq, params, f"{name}: {note}"))
        seen: set[str] = set()
        for head, d, theta, factor, length, seq, params, note in rows:
            full = {**_required(method, d, factor), **params}
            key = json.dumps([head, d, theta, factor, length, seq, _plain(full)], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            case_id = f"{method}-{len(seen) - 1:03d}"
            out.append(
                Case(case_id, "grid", method, d, head, theta, factor, length, seq, full, note)
            )
    return out


def model_cases(methods: tuple[str, ...] | None = None) -> list[Case]:
    """The tiny model's scaling per method (all, or `methods`): one case (seq_len None) for a
    method that does not depend on the length, one per `LOGIT_LENGTHS` entry for one that
    does."""
    d = MODEL["head_dim"]
    out = []
    for method in _methods(methods):
        params = _required(method, d, MODEL_FACTOR)
        if "partial_rotary_factor" in {f.name for f in _fields(method)}:
            params["partial_rotary_factor"] = 0.5
        lengths: tuple[int | None, ...] = (
            LOGIT_LENGTHS if SCALINGS[method].length_dependent else (None,)
        )
        for seq in lengths:
            suffix = "" if seq is None else f"-L{seq}"
            out.append(
                Case(f"model-{method}{suffix}", "model", method, d, d, MODEL_THETA,
                     MODEL_FACTOR, TRAIN_LENGTH, seq, params,
                     "the tiny model's scaling" + (f" at seq_len {seq}" if seq else ""))
            )  # fmt: skip
    return out

"""RoPE's inverse frequencies under every registered length-scaling method (NumPy, no JAX).

The scaling methods (`kind`: ``default``, ``linear``, ``ntk``, ``dynamic``, ``yarn``, ...) are the
classes registered in `rope_lab.registry.SCALINGS`, one module each in `rope_lab.model.scalings`;
this
module validates arguments against them and keeps the string-keyed API (`inv_freq`,
`validate_scaling`). Every formula and edge case follows Hugging Face transformers'
``modeling_rope_utils.py``, checked against transformers 5.24.0 (torch 2.13.0);
``tests/fixtures/hf_rope_golden.json`` holds its outputs. HF's float32 roundings are reproduced
where later steps amplify them: the exponent ``2i / d`` is formed in float32, and the YaRN ramp and
the whole llama3 band computation run in float32 in HF's order of operations. Other arithmetic runs
in float64; results are float32. The rotation by these frequencies is `rope_lab.model.rotation`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rope_lab.model.scalings import Scaling
from rope_lab.model.scalings.base import _is_int
from rope_lab.model.scalings.yarn import yarn_correction_range
from rope_lab.registry import SCALINGS

__all__ = [
    "ROPE_KINDS",
    "inv_freq",
    "scaling_config",
    "validate_scaling",
    "yarn_correction_range",
]

ROPE_KINDS: tuple[str, ...] = tuple(SCALINGS.names())


def _method(kind: str) -> type[Scaling]:
    if kind not in SCALINGS:
        raise ValueError(f"unknown RoPE kind {kind!r}; allowed kinds: {', '.join(ROPE_KINDS)}")
    return SCALINGS[kind]


def scaling_config(kind: str, **params: Any) -> Scaling:
    """The typed extra parameters of method `kind` (a frozen `Scaling` dataclass).

    Parameters given as None are unset (HF's convention): they take the field's default, and a
    required one is reported missing. ValueError names an unknown kind or parameter.
    """
    cls = _method(kind)
    fields = dataclasses.fields(cls)
    allowed = [f.name for f in fields]
    for name, value in params.items():
        if name not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(
                f"unknown parameter {name!r} (value {value!r}) for kind {kind!r}; allowed: {listed}"
            )
    given = {k: v for k, v in params.items() if v is not None}
    for f in fields:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in given:
            raise ValueError(f"parameter {f.name} is required for kind {kind!r}, got None")
    return cls(**given)


def validate_scaling(
    kind: str,
    rotary_dim: int,
    *,
    theta: float = 10000.0,
    factor: float = 1.0,
    original_length: int | None = None,
    seq_len: int | None = None,
    **params: Any,
) -> None:
    """Check the arguments of `inv_freq` without computing; ValueError names the bad parameter.

    Optional extra parameters may be given as None, which means "unset" (HF's convention).
    """
    _checked(kind, rotary_dim, theta, factor, original_length, seq_len, params)


def _checked(
    kind: str,
    rotary_dim: int,
    theta: float,
    factor: float,
    original_length: int | None,
    seq_len: int | None,
    params: dict[str, Any],
) -> Scaling:
    config = scaling_config(kind, **params)
    config.check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
    if seq_len is not None and (not _is_int(seq_len) or seq_len < 1):
        raise ValueError(f"seq_len must be None or an integer >= 1, got {seq_len!r}")
    return config


def inv_freq(
    kind: str,
    rotary_dim: int,
    *,
    theta: float = 10000.0,
    factor: float = 1.0,
    original_length: int | None = None,
    seq_len: int | None = None,
    **params: Any,
) -> tuple[np.ndarray, float]:
    """(rotary_dim // 2,) float32 inverse frequencies, and the attention factor (a float).

    `original_length` is the training length (required where the method's
    `needs_original_length`); `seq_len` the current length (used where `length_dependent`).
    The extra parameters of each method are the fields of its class in `rope_lab.model.scalings`.
    """
    config = _checked(kind, rotary_dim, theta, factor, original_length, seq_len, params)
    return config.inv_freq(
        rotary_dim,
        theta=float(theta),
        factor=float(factor),
        original_length=original_length,
        seq_len=seq_len,
    )

"""Rotary position embedding (RoPE): inverse frequencies under length-scaling methods, and rotation.

Scaling methods (`kind`):

- ``default``: direct extrapolation, ``theta ** (-2i / d)``.
- ``linear``: position interpolation, ``default / factor``.
- ``ntk``: static NTK-aware base change, ``theta * factor ** (d / (d - 2))``.
- ``dynamic``: dynamic NTK; ``default`` up to ``original_length``, then the NTK base change with
  the effective factor ``factor * seq_len / original_length - (factor - 1)``.
- ``yarn``: YaRN (Peng et al. 2023), ramp-blended interpolation/extrapolation + attention factor.
- ``llama3``: Llama 3.1 wavelength bands (unscaled / smoothed / divided by ``factor``).
- ``longrope``: LongRoPE / Phi-3 per-frequency rescale factors, short or long by ``seq_len``.

Every formula and edge case follows Hugging Face transformers' ``modeling_rope_utils.py``,
checked against transformers 5.24.0 (torch 2.13.0); ``tests/fixtures/hf_rope_golden.json`` holds
its outputs. HF's float32 roundings are reproduced where later steps amplify them: the exponent
``2i / d`` is formed in float32, and the YaRN ramp and the whole llama3 band computation run in
float32 in HF's order of operations. Other arithmetic runs in float64; results are float32.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

ROPE_KINDS: tuple[str, ...] = ("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")

# Extra keyword parameters each kind accepts (required ones listed in ROPE_REQUIRED_PARAMS).
ROPE_PARAMS: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": (),
    "ntk": (),
    "dynamic": (),
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "attention_factor"),
}
ROPE_REQUIRED_PARAMS: dict[str, tuple[str, ...]] = {
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
}
# Kinds that need the training length `original_length`.
NEEDS_ORIGINAL_LENGTH: tuple[str, ...] = ("dynamic", "yarn", "llama3", "longrope")

_YARN_BETA_FAST = 32.0
_YARN_BETA_SLOW = 1.0


# ----------------------------------------------------------------------------- validation


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _require_real(name: str, value: Any, *, low: float, inclusive: bool, what: str) -> None:
    ok = _is_real(value) and (value >= low if inclusive else value > low)
    if not ok:
        raise ValueError(f"{name} must be {what}, got {value!r}")


def _check_factors(name: str, value: Any, half: int) -> None:
    """A per-frequency factor list: (rotary_dim // 2,) finite positive numbers."""
    try:
        if isinstance(value, str | bytes):
            raise TypeError
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a sequence of {half} positive numbers, got {value!r}"
        ) from None
    if arr.ndim != 1 or arr.shape[0] != half:
        raise ValueError(
            f"{name} must have length {half} (rotary_dim // 2), got shape {arr.shape}: {value!r}"
        )
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{name} must hold finite positive numbers, got {value!r}")


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
    if kind not in ROPE_KINDS:
        raise ValueError(f"unknown RoPE kind {kind!r}; allowed kinds: {', '.join(ROPE_KINDS)}")
    if not _is_int(rotary_dim) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be an even integer >= 2, got {rotary_dim!r}")
    if kind in ("ntk", "dynamic") and rotary_dim < 4:
        raise ValueError(
            f"rotary_dim must be >= 4 for kind {kind!r} (exponent d / (d - 2)), got {rotary_dim!r}"
        )
    _require_real("theta", theta, low=0.0, inclusive=False, what="a finite number > 0")
    if kind == "yarn" and theta <= 1:
        raise ValueError(f"theta must be > 1 for kind 'yarn' (log theta divides), got {theta!r}")
    _require_real("factor", factor, low=1.0, inclusive=True, what="a finite number >= 1")
    if original_length is None:
        if kind in NEEDS_ORIGINAL_LENGTH:
            raise ValueError(
                f"original_length (the training length) is required for kind {kind!r}, got None"
            )
    elif not _is_int(original_length) or original_length < 1:
        raise ValueError(f"original_length must be an integer >= 1, got {original_length!r}")
    if seq_len is not None and (not _is_int(seq_len) or seq_len < 1):
        raise ValueError(f"seq_len must be None or an integer >= 1, got {seq_len!r}")

    allowed = ROPE_PARAMS[kind]
    for name in params:
        if name not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(
                f"unknown parameter {name!r} (value {params[name]!r}) for kind {kind!r}; "
                f"allowed: {listed}"
            )
    for name in ROPE_REQUIRED_PARAMS.get(kind, ()):
        if params.get(name) is None:
            raise ValueError(f"parameter {name} is required for kind {kind!r}, got None")
    given = {k: v for k, v in params.items() if v is not None}

    for name in ("beta_fast", "beta_slow"):
        if name in given:
            _require_real(name, given[name], low=0.0, inclusive=False, what="a finite number > 0")
    for name in ("mscale", "mscale_all_dim"):
        if name in given:
            _require_real(name, given[name], low=0.0, inclusive=True, what="a finite number >= 0")
    if "attention_factor" in given:
        _require_real(
            "attention_factor",
            given["attention_factor"],
            low=0.0,
            inclusive=False,
            what="a finite number > 0",
        )
    if "truncate" in given and not isinstance(given["truncate"], bool | np.bool_):
        raise ValueError(f"truncate must be a bool, got {given['truncate']!r}")
    if kind == "llama3":
        low, high = given["low_freq_factor"], given["high_freq_factor"]
        _require_real("low_freq_factor", low, low=0.0, inclusive=False, what="a finite number > 0")
        _require_real(
            "high_freq_factor", high, low=low, inclusive=False, what=f"a finite number > {low!r}"
        )
    if kind == "longrope":
        half = rotary_dim // 2
        _check_factors("short_factor", given["short_factor"], half)
        _check_factors("long_factor", given["long_factor"], half)
        if "attention_factor" not in given and factor > 1 and original_length == 1:
            raise ValueError(
                "original_length must be >= 2 for kind 'longrope' with factor > 1 "
                f"(log original_length divides), got {original_length!r}"
            )


# ----------------------------------------------------------------------------- frequencies


def _exponents(rotary_dim: int) -> np.ndarray:
    """(d/2,) exponents 2i/d, rounded to float32 as HF forms them, returned as float64."""
    even = np.arange(0, rotary_dim, 2, dtype=np.float32)
    return (even / np.float32(rotary_dim)).astype(np.float64)


def _base_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """(d/2,) float64 theta ** (-2i/d)."""
    return 1.0 / np.power(float(theta), _exponents(rotary_dim))


def _ntk_theta(theta: float, scale: float, rotary_dim: int) -> float:
    """NTK-aware base for an effective length scale."""
    return float(theta) * float(scale) ** (rotary_dim / (rotary_dim - 2))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN magnitude correction 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(
    rotary_dim: int,
    theta: float,
    original_length: int,
    beta_fast: float = _YARN_BETA_FAST,
    beta_slow: float = _YARN_BETA_SLOW,
    truncate: bool = True,
) -> tuple[float, float]:
    """(low, high) dims of the YaRN ramp: where a frequency turns beta_fast / beta_slow times.

    Unclamped bound: d * ln(L / (2 pi beta)) / (2 ln theta); with `truncate`, low is floored and
    high ceiled. Then low = max(low, 0) and high = min(high, d - 1) (HF clamps to the full rotary
    dim, not d/2 - 1, and clamps each bound on one side only).
    """

    def dim_for(rotations: float) -> float:
        return (
            rotary_dim
            * math.log(original_length / (rotations * 2 * math.pi))
            / (2 * math.log(theta))
        )

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def _yarn(
    rotary_dim: int, theta: float, factor: float, original_length: int, p: dict[str, Any]
) -> tuple[np.ndarray, float]:
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all = p.get("mscale"), p.get("mscale_all_dim")
        if mscale and mscale_all:  # HF tests truthiness: 0 counts as unset
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = p.get("beta_fast") or _YARN_BETA_FAST
    beta_slow = p.get("beta_slow") or _YARN_BETA_SLOW
    truncate = p.get("truncate")
    truncate = True if truncate is None else bool(truncate)

    low, high = yarn_correction_range(
        rotary_dim, theta, original_length, beta_fast, beta_slow, truncate
    )
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    # The ramp is evaluated in float32 like HF: its rounding is amplified by (factor - 1) below.
    idx = np.arange(rotary_dim // 2, dtype=np.float32)
    ramp = np.clip((idx - np.float32(low)) / np.float32(high - low), 0, 1).astype(np.float32)
    extrapolation_weight = np.float32(1) - ramp
    interpolation_weight = (np.float32(1) - extrapolation_weight).astype(np.float64)
    extrapolation_weight = extrapolation_weight.astype(np.float64)

    extrapolated = _base_inv_freq(theta, rotary_dim)
    interpolated = 1.0 / (factor * np.power(float(theta), _exponents(rotary_dim)))
    inv = interpolated * interpolation_weight + extrapolated * extrapolation_weight
    return inv, float(attention_factor)


def _llama3(
    rotary_dim: int, theta: float, factor: float, original_length: int, p: dict[str, Any]
) -> np.ndarray:
    """Llama 3.1 bands, in float32 in HF's operation order (the smoothing amplifies rounding)."""
    low_ff, high_ff = float(p["low_freq_factor"]), float(p["high_freq_factor"])
    f32 = np.float32
    inv = (f32(1) / np.power(f32(theta), _exponents(rotary_dim).astype(f32))).astype(f32)
    # wavelength 2 pi / inv, and L / wavelength, each as reciprocal-then-multiply (HF's rdiv).
    wavelen = (f32(1) / inv) * f32(2 * math.pi)
    low_wavelen = original_length / low_ff  # longer than this: divide by factor
    high_wavelen = original_length / high_ff  # shorter than this: keep
    long_band = wavelen > f32(low_wavelen)
    short_band = wavelen < f32(high_wavelen)
    scaled = np.where(long_band, inv / f32(factor), inv)
    smooth = ((f32(1) / wavelen) * f32(original_length) - f32(low_ff)) / f32(high_ff - low_ff)
    smoothed = (f32(1) - smooth) * scaled / f32(factor) + smooth * scaled
    return np.where(~long_band & ~short_band, smoothed, scaled)


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

    `original_length` is the training length (required by dynamic, yarn, llama3, longrope);
    `seq_len` the current length (dynamic, longrope). `default` and `ntk` ignore both, and
    `default` ignores `factor`. See the module docstring for the kinds; `ROPE_PARAMS` lists the
    extra parameters of each.
    """
    validate_scaling(
        kind,
        rotary_dim,
        theta=theta,
        factor=factor,
        original_length=original_length,
        seq_len=seq_len,
        **params,
    )
    p = {k: v for k, v in params.items() if v is not None}
    theta = float(theta)
    factor = float(factor)
    attention_factor = 1.0
    if kind == "default":
        inv = _base_inv_freq(theta, rotary_dim)
    elif kind == "linear":
        inv = _base_inv_freq(theta, rotary_dim) / factor
    elif kind == "ntk":
        inv = _base_inv_freq(_ntk_theta(theta, factor, rotary_dim), rotary_dim)
    elif kind == "dynamic":
        assert original_length is not None
        if seq_len is None or seq_len <= original_length:
            inv = _base_inv_freq(theta, rotary_dim)
        else:
            scale = factor * seq_len / original_length - (factor - 1)
            inv = _base_inv_freq(_ntk_theta(theta, scale, rotary_dim), rotary_dim)
    elif kind == "yarn":
        assert original_length is not None
        inv, attention_factor = _yarn(rotary_dim, theta, factor, original_length, p)
    elif kind == "llama3":
        assert original_length is not None
        inv = _llama3(rotary_dim, theta, factor, original_length, p)
    elif kind == "longrope":
        assert original_length is not None
        use_long = seq_len is not None and seq_len > original_length
        ext = np.asarray(p["long_factor" if use_long else "short_factor"], dtype=np.float64)
        inv = _base_inv_freq(theta, rotary_dim) / ext
        if "attention_factor" in p:
            attention_factor = float(p["attention_factor"])
        elif factor > 1:
            attention_factor = math.sqrt(1 + math.log(factor) / math.log(original_length))
    else:  # pragma: no cover - validate_scaling rejects unknown kinds
        raise AssertionError(kind)
    return np.asarray(inv, dtype=np.float32), float(attention_factor)


# ----------------------------------------------------------------------------- rotation


def rotate_half(x: Array) -> Array:
    """(..., D) -> (..., D): halves [a, b] of the last axis become [-b, a]; D must be even."""
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(
    x: Array, positions: Array, inv_freq: Array | np.ndarray, attention_factor: float | Array
) -> Array:
    """Rotate the first r = 2 * len(inv_freq) dims of x (..., L, H, Dh); the rest pass through.

    positions (L,) or (..., L), int or float. Half-split layout (as HF): dims j and j + r/2 form
    a pair rotated by angle positions * inv_freq[j]; cos and sin are scaled by attention_factor.
    Angles and the rotation are computed in float32; the result has x's dtype and shape.
    """
    inv = jnp.asarray(inv_freq, dtype=jnp.float32)
    if inv.ndim != 1:
        raise ValueError(f"inv_freq must be 1-D (r/2,), got shape {inv.shape}")
    rot = 2 * inv.shape[0]
    if rot > x.shape[-1]:
        raise ValueError(
            f"inv_freq rotates {rot} dims but x has only {x.shape[-1]} (shape {x.shape})"
        )
    pos = jnp.asarray(positions).astype(jnp.float32)
    angles = pos[..., None] * inv.reshape((1,) * pos.ndim + inv.shape)  # (..., L, r/2)
    emb = jnp.concatenate([angles, angles], axis=-1)[..., None, :]  # (..., L, 1, r)
    if emb.ndim < x.ndim:  # shared positions (L,) for a batched x (..., L, H, Dh)
        emb = emb.reshape((1,) * (x.ndim - emb.ndim) + emb.shape)
    scale = jnp.asarray(attention_factor, dtype=jnp.float32)
    cos, sin = jnp.cos(emb) * scale, jnp.sin(emb) * scale
    head = x[..., :rot].astype(jnp.float32)
    rotated = (head * cos + rotate_half(head) * sin).astype(x.dtype)
    if rot == x.shape[-1]:
        return rotated
    return jnp.concatenate([rotated, x[..., rot:]], axis=-1)

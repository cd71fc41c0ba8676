"""The RoPE rotation in JAX: queries and keys rotated by position x frequency in the half-split
layout (as Hugging Face's); the frequencies come from `rope_lab.model.rope` (NumPy)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import Array

__all__ = ["apply_rotary", "rotate_half"]


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

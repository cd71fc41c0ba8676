"""Position encodings and the three ways they enter a Transformer.

Each encoding is an Equinox module with three hooks, all taking explicit (possibly offset or
randomised) positions:

- `embed(positions)`: a (L, D) vector added to the token embeddings, or None;
- `rotate(q, k, positions)`: q and k of shape (L, H, Dh) after rotation (RoPE) or unchanged;
- `bias(positions)`: an additive (H, L, L) attention-logit bias (ALiBi), or None.

Fixed buffers (RoPE frequencies, ALiBi slopes) are wrapped in `Frozen`: they are arrays, so a
scaling change swaps them without recompiling, but they are never trained.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from rope_lab import rope
from rope_lab.config import ModelConfig, thaw


class Frozen(eqx.Module):
    """A non-trainable array (excluded from optimisation and from the NTK parameters)."""

    value: Array

    def get(self) -> Array:
        """The array, with gradients stopped."""
        return jax.lax.stop_gradient(self.value)


class PositionEncoding(eqx.Module):
    """Base class: no position information anywhere (NoPE)."""

    def embed(self, positions: Array) -> Float[Array, "*B L D"] | None:
        """Additive input embedding for positions (*B, L), or None."""
        return None

    def rotate(
        self, q: Float[Array, "L H Dh"], k: Float[Array, "L H Dh"], positions: Array
    ) -> tuple[Array, Array]:
        """Queries and keys after the position transform."""
        return q, k

    def bias(self, positions: Array) -> Float[Array, "H L L"] | None:
        """Additive attention-logit bias, or None."""
        return None


class NoPE(PositionEncoding):
    """No position encoding; causal masking alone carries order."""


class LearnedPE(PositionEncoding):
    """Learned absolute table of shape (max_length, D); untrained rows keep their init."""

    table: Float[Array, "P D"]

    def __init__(self, max_length: int, width: int, *, key: PRNGKeyArray, std: float = 1.0):
        self.table = std * jax.random.normal(key, (max_length, width))

    def embed(self, positions: Array) -> Float[Array, "*B L D"]:
        """Rows of the table at integer positions (*B, L)."""
        return self.table[positions.astype(jnp.int32)]


class SinusoidalPE(PositionEncoding):
    """Vaswani et al. (2017) sinusoids: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i)."""

    width: int = eqx.field(static=True)
    base: float = eqx.field(static=True, default=10000.0)

    def embed(self, positions: Array) -> Float[Array, "*B L D"]:
        """(*B, L, D) sinusoids at positions (*B, L)."""
        half = (self.width + 1) // 2
        freqs = self.base ** (-2.0 * jnp.arange(half, dtype=jnp.float32) / self.width)
        angles = positions.astype(jnp.float32)[..., None] * freqs.reshape(
            (1,) * positions.ndim + (half,)
        )
        pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
        return pe.reshape(*positions.shape, 2 * half)[..., : self.width]


class RotaryPE(PositionEncoding):
    """Rotary embedding (Su et al. 2021) in the half-split layout, with swappable frequencies."""

    inv_freq: Frozen
    attention_factor: Frozen

    def __init__(self, inv_freq: np.ndarray, attention_factor: float):
        self.inv_freq = Frozen(jnp.asarray(inv_freq, jnp.float32))
        self.attention_factor = Frozen(jnp.asarray(attention_factor, jnp.float32))

    def rotate(self, q: Array, k: Array, positions: Array) -> tuple[Array, Array]:
        """Rotate the first rotary_dim dims of q and k (L, H, Dh) by position x frequency."""
        inv_freq, factor = self.inv_freq.get(), self.attention_factor.get()
        return (
            rope.apply_rotary(q, positions, inv_freq, factor),
            rope.apply_rotary(k, positions, inv_freq, factor),
        )


class ALiBi(PositionEncoding):
    """Press et al. (2022) linear biases: logit(i, j) -= slope_h * (p_i - p_j)."""

    slopes: Frozen

    def __init__(self, heads: int):
        self.slopes = Frozen(jnp.asarray(alibi_slopes(heads), jnp.float32))

    def bias(self, positions: Array) -> Float[Array, "H L L"]:
        """(H, L, L) bias from the distance between query and key positions (L,)."""
        pos = positions.astype(jnp.float32)
        distance = pos[:, None] - pos[None, :]
        return -self.slopes.get()[:, None, None] * distance[None]


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (heads,): a geometric sequence 2^(-8/n)^h, interleaved for n not 2^k."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if heads <= 0:
        raise ValueError(f"heads: must be positive, got {heads}")
    if heads & (heads - 1) == 0:
        return np.asarray(power_of_two(heads))
    closest = 2 ** math.floor(math.log2(heads))
    extra = power_of_two(2 * closest)[0::2][: heads - closest]
    return np.asarray(power_of_two(closest) + extra)


def rope_frequencies(
    cfg: ModelConfig,
    train_length: int,
    *,
    kind: str | None = None,
    factor: float | None = None,
    params: dict | None = None,
    seq_len: int | None = None,
) -> tuple[np.ndarray, float]:
    """(rotary_dim // 2,) inverse frequencies and attention factor for a model config.

    Defaults to the training-time scaling; `kind`/`factor`/`params` override it (evaluation
    under another method), with `train_length` as the original length.
    """
    from rope_lab.config import rotary_dim_of

    r = cfg.position.rope
    if kind is None:
        kind, factor, params = r.scaling, r.factor, thaw(r.params)
    return rope.inv_freq(
        kind,
        rotary_dim_of(cfg),
        theta=r.theta,
        factor=1.0 if factor is None else factor,
        original_length=train_length,
        seq_len=seq_len if seq_len is not None else train_length,
        **(params or {}),
    )


def make_position_encoding(
    cfg: ModelConfig, *, max_length: int, train_length: int, key: PRNGKeyArray
) -> PositionEncoding:
    """Build the configured encoding; `max_length` sizes a learned table."""
    kind = cfg.position.kind
    if kind == "none":
        return NoPE()
    if kind == "learned":
        return LearnedPE(max_length, cfg.width, key=key)
    if kind == "sinusoidal":
        return SinusoidalPE(cfg.width)
    if kind == "rope":
        return RotaryPE(*rope_frequencies(cfg, train_length))
    if kind == "alibi":
        return ALiBi(cfg.n_heads)
    raise ValueError(f"model.position.kind: unknown {kind!r}")


def with_rope_scaling(encoding: RotaryPE, inv_freq: np.ndarray, attention_factor: float):
    """The same rotary encoding with new frequencies (same shapes: no recompilation).

    The new arrays are placed like the old ones: a compiled program is keyed on its arguments'
    shardings too, so an uncommitted array in place of a committed one would recompile it."""
    old = (encoding.inv_freq.value, encoding.attention_factor.value)
    new = [jnp.asarray(x, jnp.float32) for x in (inv_freq, attention_factor)]
    new = [_placed_like(x, o) for x, o in zip(new, old, strict=True)]
    return eqx.tree_at(lambda e: (e.inv_freq.value, e.attention_factor.value), encoding, new)


def _placed_like(new: Array, old: Array) -> Array:
    if isinstance(old, jax.core.Tracer) or not isinstance(old, jax.Array):
        return new
    return jax.device_put(new, old.sharding) if old.committed else new


def random_positions(key: PRNGKeyArray, length: int, max_length: int) -> Int[Array, " L"]:
    """Sorted random subset of [0, max_length) of size `length` (Ruoss et al. 2023)."""
    chosen = jax.random.choice(key, max_length, (length,), replace=False)
    return jnp.sort(chosen).astype(jnp.int32)

"""The key/value cache of incremental decoding: its layout and the protocols it is read under.

Each layer kind of the model's pattern has its own cache (`LayerCache`, all of them a
`KVCache`): `capacity` slots, or only `window` slots for a sliding-window kind (a ring buffer:
slot = sequence index mod window), holding the keys and values of the kind's R repeats and,
per slot, the sequence index and position value of the token it holds. A forget gate (FoX)
adds each cached key's cumulative log gate c_j per head (`decay`): a query at index i adds
c_i - c_j to its logit for key j, and c_i is the newest slot's c plus the query's own log
gate, so the running sum needs no field of its own. Under a
relative-position remap a kind's keys are cached once per position set (`position_sets`).
`init_cache` builds an empty one; `rope_lab.model.decode` fills and reads it.

Length-dependent RoPE scalings (dynamic NTK) make a cache protocol matter, since keys cached
early were rotated with the frequencies of a shorter sequence (`PROTOCOLS`):

- `prefill_fixed`: the scaling is chosen once, from prompt length plus generation budget (the
  longest prefix the model reads), and used for every token (what serving stacks that fix
  the scaling at prefill do);
- `per_step_recompute`: at each step the frequencies of the current length rotate the query
  and every cached key again (the cache holds keys before rotation; what re-rotating
  implementations do). Exact for one layer; in a deeper model the cached values and the later
  layers' keys still come from hidden states computed under earlier frequencies;
- `per_step_stale`: new tokens get the current frequencies, cached keys keep the ones they
  were rotated with (what a naive cache does);
- `per_step_full`: no cache: every step runs the whole prefix at its length, which is teacher
  forcing with the scaling taken at each prefix length (exact; O(L^2) per token).
"""

from __future__ import annotations

from typing import Final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.config import DECODE_PROTOCOLS
from rope_lab.model.positions.modules.remapped import RemappedRotary
from rope_lab.model.transformer import Transformer

PROTOCOLS: Final = DECODE_PROTOCOLS


class LayerCache(eqx.Module):
    """The cache of one layer kind over its R repeats: keys and values (R, KV, C, Dh) of the
    key/value heads (`model.kv_heads`: grouped-query attention caches heads / kv_heads times
    less) and, per slot, the sequence index (-1: empty) and position value of the token it
    holds; with a forget gate, the cumulative log gate c of each slot's token per query head
    (R, H, C), float32 whatever the cache's dtype (0 in empty slots); None without one."""

    k: Float[Array, "R KV C Dh"]
    v: Float[Array, "R KV C Dh"]
    index: Int[Array, " C"]
    position: Int[Array, " C"]
    decay: Float[Array, "R H C"] | None = None


class KVCache(eqx.Module):
    """Per layer kind of the model's pattern, its `LayerCache`; `length`: tokens consumed."""

    layers: tuple[LayerCache, ...]
    length: Int[Array, ""]

    def nbytes(self) -> int:
        """Bytes the cache holds (keys, values and slot bookkeeping)."""
        return sum(x.nbytes for x in jax.tree.leaves(self) if eqx.is_array(x))


def slots(model: Transformer, capacity: int) -> tuple[int, ...]:
    """Cache slots of each layer kind: `capacity`, or its window when that is smaller."""
    return tuple(
        capacity if kind.window is None else min(capacity, kind.window)
        for kind in model.config.pattern
    )


def init_cache(model: Transformer, capacity: int, dtype=None, *, raw_keys: bool = False) -> KVCache:
    """An empty cache for up to `capacity` tokens. Under a relative-position remap a kind's
    keys are cached once per position set (`position_sets`: each set's key positions depend
    on the key alone), folded into the head axis (S KV heads); `raw_keys` (keys before
    rotation, rotated at every step) caches them once. A forget gate's cumulative log gates
    are cached per query head (`LayerCache.decay`)."""
    cfg = model.config
    forget = cfg.attention_options.forget_gate
    pattern = cfg.pattern
    repeats, heads, dh = cfg.depth // len(pattern), cfg.n_kv_heads, cfg.d_head
    dtype = model.embedding.dtype if dtype is None else dtype
    layers = tuple(
        LayerCache(
            k=jnp.zeros((repeats, heads * (1 if raw_keys else sets), c, dh), dtype),
            v=jnp.zeros((repeats, heads, c, dh), dtype),
            index=jnp.full((c,), -1, jnp.int32),
            position=jnp.zeros((c,), jnp.int32),
            decay=jnp.zeros((repeats, cfg.n_heads, c), jnp.float32) if forget else None,
        )
        for c, sets in zip(slots(model, capacity), position_sets(model), strict=True)
    )
    return KVCache(layers, jnp.zeros((), jnp.int32))


def position_sets(model: Transformer) -> tuple[int, ...]:
    """Per layer kind, the position sets its encoding rotates keys in (1 without a remap)."""
    kinds = range(len(model.config.pattern))
    encodings = (model.encoding_of(i) for i in kinds)
    return tuple(e.sets.n_sets if isinstance(e, RemappedRotary) else 1 for e in encodings)


__all__ = ["PROTOCOLS", "KVCache", "LayerCache", "init_cache", "position_sets", "slots"]

"""Incremental decoding with a key/value cache, for every position encoding and layer layout.

`prefill(model, tokens (P,), capacity)` runs the prompt through the model as one forward pass
and keeps each layer's keys (rotated by the encoding, for RoPE) and values in a cache
(`rope_lab.model.kv_cache`: one per layer kind, a ring buffer of `window` slots for a
sliding-window kind); `decode_step` then feeds one token at a time, attending over the cache.
Bias encodings (ALiBi, T5, KERPLE, FIRE) compute their bias from the cached position values at
each step; CoPE's contextual term reads the cached keys in sequence order. A forget gate (FoX)
caches each key's cumulative log gate c_j, and a new query at index i, whose c_i is the newest
cached c plus its own log gate, adds c_i - c_j to its logit for key j. Shapes are fixed by
`capacity`, so a generation of any length up to it compiles once (`generate` scans
`decode_step`). Under a length-dependent RoPE scaling `generate` follows one of the cache
protocols (`kv_cache.PROTOCOLS`). `prefill_padded` is `prefill` with a traced prompt length,
for `rope_lab.model.decode_padded`.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model.attention import attend, attend_keys
from rope_lab.model.attention_layer import Attention
from rope_lab.model.kv_cache import PROTOCOLS, KVCache, LayerCache, init_cache, position_sets
from rope_lab.model.positions.modules import PositionEncoding
from rope_lab.model.transformer import Block, Transformer, with_scaling


def _fold(k: Array) -> Array:
    """Keys of S position sets (S, KV, L, Dh) as S KV heads (S KV, L, Dh); others as given."""
    return k.reshape(-1, *k.shape[-2:]) if k.ndim == 4 else k


def _unfold(k: Array, sets: int) -> Array:
    """The inverse of `_fold` for `sets` position sets."""
    return k if sets == 1 else k.reshape(sets, -1, *k.shape[-2:])


def _blocks(model: Transformer) -> tuple[Block, Block]:
    """Block params reshaped (R, P, ...) (R repeats of the P kinds) and the static part."""
    params, static = eqx.partition(model.blocks, eqx.is_array)
    p = len(model.config.pattern)
    return jax.tree.map(lambda a: a.reshape(-1, p, *a.shape[1:]), params), static


def _block(static: Block, r_params: Block, i: int) -> Block:
    """Kind i's block of one repeat."""
    return eqx.combine(jax.tree.map(lambda a: a[i], r_params), static)


def _rest_of_block(block: Block, h: Array, x: Array, heads: Float[Array, "H L Dh"]) -> Array:
    """The block after attention: the layer's output from the heads' outputs (`x` the
    attention's input, for an output gate), residual, MLP."""
    return block.finish(h, block.attn.output(x, heads))


def prefill(
    model: Transformer,
    tokens: Int[Array, " P"],
    capacity: int,
    positions: Array | None = None,
    *,
    raw_keys: bool = False,
) -> tuple[Float[Array, "P V"], KVCache]:
    """Logits (P, V) of the prompt, equal to `model(tokens, positions)`, and the cache holding
    its keys and values (the last `window` of them for a windowed kind). P <= capacity.
    `raw_keys`: cache the keys before rotation (for `decode_step(rotate_cache=True)`)."""
    n = tokens.shape[0]
    if n > capacity:
        raise ValueError(f"prompt of {n} tokens does not fit a cache of capacity {capacity}")
    positions = jnp.arange(n, dtype=jnp.int32) if positions is None else positions
    cache = init_cache(model, capacity, raw_keys=raw_keys)
    x, kv = _forward_keeping_kv(model, tokens, positions, raw_keys)
    layers = []
    for (k, v, decay), layer in zip(kv, cache.layers, strict=True):
        c = layer.index.shape[0]
        keep = jnp.arange(max(0, n - c), n)  # the last c tokens, one per slot
        slot = keep % c
        cached = layer.decay
        layers.append(
            LayerCache(
                k=layer.k.at[:, :, slot].set(k[:, :, keep].astype(layer.k.dtype)),
                v=layer.v.at[:, :, slot].set(v[:, :, keep].astype(layer.v.dtype)),
                index=layer.index.at[slot].set(keep.astype(jnp.int32)),
                position=layer.position.at[slot].set(positions[keep]),
                decay=None if cached is None else cached.at[:, :, slot].set(decay[:, :, keep]),
            )
        )
    logits = model.readout(x)
    return logits, KVCache(tuple(layers), jnp.asarray(n, jnp.int32))


def _forward_keeping_kv(
    model: Transformer, tokens: Int[Array, " L"], positions: Int[Array, " L"], raw_keys: bool
) -> tuple[Float[Array, "L D"], tuple]:
    """The last block's output (L, D) over `tokens` and, per layer kind, the keys (before
    rotation with `raw_keys`; under a remap S KV heads, `_fold`) and values (R, KV, L, Dh) of
    its R repeats, and their forget gate's cumulative log gates (R, H, L) (None without one)."""
    pattern = model.config.pattern
    params, static = _blocks(model)
    x = model.embed(tokens, positions)

    def repeat(h, r_params):
        kept = []
        for i, kind in enumerate(pattern):
            block = _block(static, r_params, i)
            enc = model.encoding_of(i)
            a = block.attn
            attn_in = block.attention_input(h)
            q, k, v = a.project(attn_in, positions, _unrotated(enc, raw_keys))
            cached = _fold(k)
            if raw_keys:
                q, k = _rotate_heads(enc, q, k, positions, positions)
            rows = a.row_scale(positions, kind, model.temperature)
            decay = a.log_decay(attn_in)
            out = attend(q, k, v, positions, enc, variant=a.variant, scale=a.scale,
                         implementation=a.implementation, window=kind.window,
                         row_scale=rows, log_decay=decay)  # fmt: skip
            h = _rest_of_block(block, h, attn_in, out)
            kept.append((cached, v, decay))
        return h, tuple(kept)

    return jax.lax.scan(repeat, x, params)


def prefill_padded(
    model: Transformer,
    buffer: Int[Array, " C"],
    length: Int[Array, ""],
    *,
    raw_keys: bool = False,
) -> tuple[Float[Array, "C V"], KVCache]:
    """`prefill` of the prompt buffer[:length] at the capacity C of `buffer`, with `length` a
    traced value, so one compiled program serves every prompt length. The forward runs over
    the whole buffer (positions 0..C-1): causal masking makes rows < length exact whatever
    the padding after them holds (a pad on the left would move the prompt's positions). The
    cache holds tokens 0..length-1 only (the last `window` of them for a windowed kind), as
    `prefill(model, buffer[:length], C)` does; logits rows >= length read the pads."""
    c_total = buffer.shape[0]
    positions = jnp.arange(c_total, dtype=jnp.int32)
    n = jnp.asarray(length, jnp.int32)
    x, kv = _forward_keeping_kv(model, buffer, positions, raw_keys)
    layers = []
    empty = init_cache(model, c_total, raw_keys=raw_keys).layers
    for (k, v, decay), layer in zip(kv, empty, strict=True):
        c = layer.index.shape[0]
        s = jnp.arange(c, dtype=jnp.int32)
        held = s + c * ((n - 1 - s) // c)  # the last token i < n with i % c == s; < 0: none
        valid = held >= 0
        i = jnp.maximum(held, 0)

        def kept(a, like, valid=valid, i=i):
            return jnp.where(valid[:, None], a[:, :, i], 0).astype(like.dtype)

        layers.append(
            LayerCache(
                k=kept(k, layer.k),
                v=kept(v, layer.v),
                index=jnp.where(valid, held, -1),
                position=jnp.where(valid, positions[i], 0),
                decay=None if decay is None else jnp.where(valid, decay[:, :, i], 0.0),
            )
        )
    return model.readout(x), KVCache(tuple(layers), n)


def decode_step(
    model: Transformer,
    cache: KVCache,
    token: Int[Array, ""],
    position: Int[Array, ""] | None = None,
    *,
    rotate_cache: bool = False,
) -> tuple[Float[Array, " V"], KVCache]:
    """Logits (V,) of the next token after `token` at `position` (default: the cache length),
    and the cache with it appended. Equal to the last row of a full forward over the whole
    prefix (`model(prefix)[-1]`) when the encoding does not depend on the length.

    `rotate_cache`: the cache holds keys before rotation and the model's current encoding
    rotates them all at every step (`per_step_recompute`; from `prefill(raw_keys=True)`)."""
    n = cache.length
    position = jnp.asarray(n if position is None else position, jnp.int32)
    pattern = model.config.pattern
    sets = (1,) * len(pattern) if rotate_cache else position_sets(model)
    params, static = _blocks(model)
    x = model.embed(token[None], position[None])
    # slot bookkeeping, the same for every repeat of a kind; `shift` orders slots oldest first
    books = []
    for layer in cache.layers:
        c = layer.index.shape[0]
        index = layer.index.at[n % c].set(n)
        pos = layer.position.at[n % c].set(position)
        shift = (n + 1) % c
        books.append((n % c, shift, index, pos, jnp.roll(index, -shift), jnp.roll(pos, -shift)))

    def repeat(h, xs):
        r_params, r_kv = xs  # per kind: keys, values, cumulative log gates (or None)
        new = []
        for i, kind in enumerate(pattern):
            block = _block(static, r_params, i)
            enc = model.encoding_of(i)
            a = block.attn
            slot, shift, _, _, ordered_index, ordered_pos = books[i]
            attn_in = block.attention_input(h)
            q, k, v = a.project(attn_in, position[None], _unrotated(enc, rotate_cache))
            ks = r_kv[i][0].at[:, slot].set(_fold(k)[:, 0].astype(r_kv[i][0].dtype))
            vs = r_kv[i][1].at[:, slot].set(v[:, 0].astype(r_kv[i][1].dtype))
            kk, vv = jnp.roll(ks, -shift, axis=1), jnp.roll(vs, -shift, axis=1)
            kk = _unfold(kk, sets[i])
            q_decay, cs = _step_decay(a, attn_in, r_kv[i][2], slot, n)
            k_decay = None if cs is None else jnp.roll(cs, -shift, axis=1)
            if rotate_cache:
                q, kk = _rotate_heads(enc, q, kk, position[None], ordered_pos)
            # a windowed kind's ring buffer holds only its window: empty slots are all it hides
            visible = ordered_index >= 0
            if not a.variant.own_key():  # a normaliser that reads only keys before the query
                visible = visible & (ordered_index < n)
            rows = a.row_scale(position[None], kind, model.temperature, index=n[None])
            rows = None if rows is None else jnp.broadcast_to(rows, (a.heads, 1))
            out = attend_keys(q, kk, vv, position[None], ordered_pos, visible[None], enc,
                              variant=a.variant, scale=a.scale, row_scale=rows,
                              q_decay=q_decay, k_decay=k_decay)  # fmt: skip
            h = _rest_of_block(block, h, attn_in, out)
            new.append((ks, vs, cs))
        return h, tuple(new)

    kv = tuple((layer.k, layer.v, layer.decay) for layer in cache.layers)
    x, kv = jax.lax.scan(repeat, x, (params, kv))
    layers = tuple(
        LayerCache(k=k, v=v, index=book[2], position=book[3], decay=decay)
        for (k, v, decay), book in zip(kv, books, strict=True)
    )
    logits = model.readout(x)[0]
    return logits, KVCache(layers, n + 1)


def _step_decay(
    attn: Attention, x: Float[Array, "1 D"], cached: Float[Array, "H C"] | None, slot, n
) -> tuple[Float[Array, "H 1"] | None, Float[Array, "H C"] | None]:
    """The new token's cumulative log gate c_n (H, 1) and the slots' c with it written at
    `slot`, or (None, None) without a forget gate. c_n is c_{n-1} (the slot of index n - 1:
    the newest token is always cached; 0 in an empty cache) plus the token's own log gate."""
    own = attn.log_decay(x)  # (H, 1): a cumulative sum over one token is its log gate
    if own is None or cached is None:
        return None, None
    c = cached[:, (n - 1) % cached.shape[1]][:, None] + own
    return c, cached.at[:, slot].set(c[:, 0])


class _NoRotation(PositionEncoding):
    """The wrapped encoding with rotation switched off (keys and queries kept as projected);
    every other hook is the wrapped one's."""

    inner: PositionEncoding

    def embed(self, positions):
        return self.inner.embed(positions)

    def bias(self, q_positions, k_positions):
        return self.inner.bias(q_positions, k_positions)

    def contextual_bias(self, q, logits, visible):
        return self.inner.contextual_bias(q, logits, visible)


def _unrotated(encoding: PositionEncoding, raw: bool) -> PositionEncoding:
    """The encoding, or with `raw` the same without its rotation."""
    return _NoRotation(encoding) if raw else encoding


def _rotate_heads(
    encoding: PositionEncoding, q: Array, k: Array, q_pos: Array, k_pos: Array
) -> tuple[Array, Array]:
    """Rotate heads-major queries (H, Lq, Dh) and keys (H, Lk, Dh) at their positions (under a
    remap: (S, H, L, Dh), one rotation per position set)."""
    qr, _ = encoding.rotate(q.transpose(1, 0, 2), q.transpose(1, 0, 2), q_pos)
    _, kr = encoding.rotate(k.transpose(1, 0, 2), k.transpose(1, 0, 2), k_pos)
    return jnp.swapaxes(qr, -3, -2), jnp.swapaxes(kr, -3, -2)


def encodings_by_length(
    model: Transformer, method: str, factor: float, params: dict | None, lengths: Sequence[int]
) -> tuple:
    """The arrays of the model's encodings (`position`, `layer_positions`) under a scaling at
    each of `lengths`, stacked along a leading axis (one step's frequencies per length, for
    `generate` to scan over)."""
    trees = [
        eqx.filter((m.position, m.layer_positions), eqx.is_array)
        for m in (with_scaling(model, method, factor, params, seq_len=n) for n in lengths)
    ]
    return jax.tree.map(lambda *a: jnp.stack(a), *trees)


def generate(
    model: Transformer,
    prompt: Int[Array, " P"],
    steps: int,
    capacity: int,
    *,
    protocol: str = "prefill_fixed",
    scaling: tuple[str, float, dict | None] | None = None,
) -> tuple[Int[Array, " N"], Float[Array, "N V"]]:
    """Greedy decoding of `steps` tokens after `prompt` (P + steps - 1 <= capacity: the last
    token is produced, never fed back): the tokens
    chosen (N,) and the logits they were chosen from (N, V), the first from the prompt's last
    row. `scaling` (method, factor, params) is applied under `protocol` (`PROTOCOLS`; for a
    method that does not depend on the length all of them give the same tokens); None: the
    model as given."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown decode protocol {protocol!r}; allowed: {', '.join(PROTOCOLS)}")
    p = prompt.shape[0]
    if p + steps - 1 > capacity:
        raise ValueError(
            f"prompt {p} + {steps} new tokens - 1 exceed the cache capacity {capacity}"
        )
    if scaling is None:
        return _generate_fixed(model, prompt, steps, capacity)
    method, factor, params = scaling
    if protocol == "prefill_fixed":
        # the longest prefix read: the last token is produced, never fed back
        fixed = with_scaling(model, method, factor, params, seq_len=p + steps - 1)
        return _generate_fixed(fixed, prompt, steps, capacity)
    # the step that reads token t (index p + t - 1) sees a prefix of p + t tokens
    model = own_encodings(model)  # the structure of the scaled encodings the steps read
    lengths = range(p + 1, p + steps)
    stacked = encodings_by_length(model, method, factor, params, lengths) if lengths else None
    at_prompt = with_scaling(model, method, factor, params, seq_len=p)
    if protocol == "per_step_full":
        return _scan_full(model, at_prompt, prompt, stacked, steps, capacity)
    recompute = protocol == "per_step_recompute"
    first, cache = prefill(at_prompt, prompt, capacity, raw_keys=recompute)
    return _scan(model, cache, first[-1], stacked, steps, rotate_cache=recompute)


def _scan_full(model, at_prompt, prompt, stacked, steps: int, capacity: int):
    """`per_step_full`: every step a forward over the whole prefix (padded to `capacity`; the
    model is causal, so row n reads tokens 0..n only) under that step's encodings."""
    p = prompt.shape[0]
    buffer = jnp.zeros((capacity,), jnp.int32).at[:p].set(prompt)
    first = at_prompt(buffer)[p - 1]
    token = jnp.argmax(first).astype(jnp.int32)
    _, static = eqx.partition((model.position, model.layer_positions), eqx.is_array)

    def step(carry, xs):
        buffer, token = carry
        n, step_arrays = xs
        buffer = buffer.at[n].set(token)
        encs = eqx.combine(step_arrays, static)
        m = eqx.tree_at(lambda m: (m.position, m.layer_positions), model, encs)
        logits = m(buffer)[n]
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return (buffer, nxt), (nxt, logits)

    if steps <= 1:
        return token[None][:steps], first[None][:steps]
    index = jnp.arange(p, p + steps - 1, dtype=jnp.int32)
    _, (tokens, logits) = jax.lax.scan(step, (buffer, token), (index, stacked))
    return jnp.concatenate([token[None], tokens]), jnp.concatenate([first[None], logits])


def _generate_fixed(model, prompt, steps, capacity):
    first, cache = prefill(model, prompt, capacity)
    return _scan(model, cache, first[-1], None, steps, rotate_cache=False)


def _scan(model, cache, first_logits, stacked, steps: int, *, rotate_cache: bool):
    """Greedy tokens and logits: the first from `first_logits`, each next one from a
    `decode_step` of the previous token, under that step's encoding arrays (`stacked`, with a
    leading axis of steps - 1) or the model's own (None)."""
    token = jnp.argmax(first_logits).astype(jnp.int32)
    encodings = (model.position, model.layer_positions)
    arrays, static = eqx.partition(encodings, eqx.is_array)

    def step(carry, step_arrays):
        cache, token = carry
        encs = eqx.combine(arrays if step_arrays is None else step_arrays, static)
        m = eqx.tree_at(lambda m: (m.position, m.layer_positions), model, encs)
        logits, cache = decode_step(m, cache, token, rotate_cache=rotate_cache)
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return (cache, nxt), (nxt, logits)

    if steps <= 1:
        return token[None][:steps], first_logits[None][:steps]
    _, (tokens, logits) = jax.lax.scan(step, (cache, token), stacked, length=steps - 1)
    return (
        jnp.concatenate([token[None], tokens]),
        jnp.concatenate([first_logits[None], logits]),
    )


def own_encodings(model: Transformer) -> Transformer:
    """The model with each layer kind holding its encoding (`with_scaling`'s structure: a kind
    without its own shares a copy of the model-wide one); the same network."""
    if not model.config.layers:
        return model
    kinds = tuple(model.encoding_of(i) for i in range(len(model.config.layers)))
    return eqx.tree_at(lambda m: m.layer_positions, model, kinds, is_leaf=lambda x: x is None)


__all__ = [
    "decode_step",
    "encodings_by_length",
    "generate",
    "own_encodings",
    "prefill",
    "prefill_padded",
]

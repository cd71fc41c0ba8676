"""Causal self-attention of heads-major operands, by one of three implementations.

`attend(q, k, v, positions, encoding, ...)` takes queries (*B, H, L, Dh) and keys already
rotated by the position encoding, keys and values with H or fewer heads (*B, KV, L, Dh;
grouped-query attention: query head h reads key/value head h // (H / KV), `expand_kv`), and
asks the encoding for its additive logit bias
block by block (`encoding.bias(q_positions, k_positions)`), so no implementation builds an
(H, L, L) bias. Query i attends key j when j <= i (sequence index, not position value) and, with
a `window`, when i - j < window. An optional `row_scale` (*B, H, L) multiplies query i's whole
logit row, bias included, before the softmax: attention temperature (Scalable-Softmax, Llama 4's
query scaling, zero-shot log-length scaling) for every implementation and encoding.

- `reference`: each query block against its whole causal key prefix, exact softmax, autodiff
  backward. Fastest on CPU at short lengths; memory grows with L^2. The only implementation
  that sees a query's whole row of keys at once, so the only one that runs an encoding's
  `contextual_bias` (CoPE), which it adds to each block's logits before the row scale and mask.
- `blocked`: the online-softmax (flash) kernel in (block x block) tiles, with a custom VJP that
  recomputes each tile's logits, so memory is linear in L forward and backward
  (`rope_lab.model.flash`).
- `cudnn`: `jax.nn.dot_product_attention` with the cuDNN kernel (GPU; float16/bfloat16; for
  encodings without a bias hook).

`auto` picks, at trace time, from the backend, the dtype, the encoding and the length
(`choose`). On TPU `auto` runs `blocked` (Pallas' splash kernels are not wired in). An encoding
with a contextual term runs `reference` at every length, on every backend.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from rope_lab.config import ATTENTION_IMPLEMENTATIONS, ConfigError
from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.model.attention_logits import (
    CONTEXTUAL_NEEDS_REFERENCE,
    SOFTMAX,
    Variant,
    block_logits,
    fused_refusal,
    has_contextual,
    has_remap,
    remap_choice,
    row_weights,
    visibility,
    visible_keys,
    with_decay,
)
from rope_lab.model.flash import blocked_attention
from rope_lab.model.memory import REFERENCE_MAX_LENGTH, causal_blocks
from rope_lab.model.positions.modules import PositionEncoding


def attend(
    q: Float[Array, "*B H L Dh"],
    k: Float[Array, "*B H L Dh"],
    v: Float[Array, "*B H L Dh"],
    positions: Int[Array, "*B L"],
    encoding: PositionEncoding,
    *,
    variant: Variant,
    scale: float,
    implementation: str = "auto",
    window: int | None = None,
    row_scale: Float[Array, "*B H L"] | None = None,
    log_decay: Float[Array, "*B H L"] | None = None,
) -> Float[Array, "*B H L Dh"]:
    """Causal attention outputs (*B, H, L, Dh) by `implementation` (see the module docstring),
    computing what `variant` says (`attention_logits.Variant`: softmax, with its prior logit if
    any, or its normaliser).
    `log_decay` (*B, H, L): a forget gate's cumulative log gates c, adding c_i - c_j to the
    logit of each pair (FoX; reference and blocked only).

    `row_scale` (broadcastable to (*B, H, L)) multiplies each query's logits, bias included.
    k and v may have fewer heads (*B, KV, L, Dh), KV dividing H (grouped-query attention).
    Under a relative-position remap (`encoding.remap_choice`) q and k carry one rotation per
    position set, (*B, S, H, L, Dh) and (*B, S, KV, L, Dh); each pair's logit comes from its set.
    """
    remapped = has_remap(encoding, positions)
    has_bias = _has_bias(encoding, positions)
    heads_shape = (*q.shape[: -4 if remapped else -3], *q.shape[-3:-1])  # (*B, H, L)
    contextual = has_contextual(encoding, q)
    chosen = choose(
        implementation,
        q.shape[-2],
        q.dtype,
        has_bias=has_bias,
        contextual=contextual,
        remapped=remapped,
        variant=variant.config,
    )
    if log_decay is not None:
        log_decay = log_decay.astype(jnp.float32)
    if row_scale is not None:
        row_scale = jnp.broadcast_to(row_scale, heads_shape).astype(jnp.float32)
    if chosen == "cudnn":
        if row_scale is not None:  # no bias: scaling the logits is scaling the queries
            q = (q * row_scale[..., None]).astype(q.dtype)
        return fused_attention(q, k, v, scale=scale, window=window, implementation="cudnn")
    k, v = expand_kv(k, q.shape[-3]), expand_kv(v, q.shape[-3])
    one = reference_attention if chosen == "reference" else blocked_attention
    bias_encoding = encoding if has_bias or contextual or remapped else None

    def per_sequence(q, k, v, positions, row_scale, log_decay):
        return one(
            q,
            k,
            v,
            positions,
            bias_encoding,
            variant=variant,
            scale=scale,
            window=window,
            row_scale=row_scale,
            log_decay=log_decay,
        )

    for _ in range(len(heads_shape) - 2):
        per_sequence = jax.vmap(per_sequence)
    return per_sequence(q, k, v, positions, row_scale, log_decay)


def choose(
    implementation: str,
    length: int,
    dtype,
    *,
    has_bias: bool,
    contextual: bool = False,
    remapped: bool = False,
    variant: AttentionFnConfig = SOFTMAX.config,
) -> str:
    """The implementation `auto` resolves to (or `implementation` itself, checked).

    A contextual term (`contextual`): reference, at any length. Otherwise GPU: cuDNN where it
    applies (16-bit operands, no bias, no position remap, a `variant` it computes), else
    blocked. TPU: blocked. CPU: reference up to REFERENCE_MAX_LENGTH, blocked beyond.
    """
    if implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ConfigError(
            f"model.attention: unknown {implementation!r}; "
            f"allowed: {', '.join(ATTENTION_IMPLEMENTATIONS)}"
        )
    if contextual:
        if implementation not in ("auto", "reference"):
            raise ConfigError(CONTEXTUAL_NEEDS_REFERENCE.format(implementation=implementation))
        return "reference"
    backend = jax.default_backend()
    if implementation == "cudnn" and not variant.fused_ok:
        raise ConfigError(fused_refusal(variant))
    if implementation == "cudnn":
        if backend != "gpu":
            raise ConfigError(f"model.attention: cudnn needs a CUDA GPU; the backend is {backend}")
        if has_bias or remapped:
            what = "a position bias" if has_bias else "a relative-position remap"
            raise ConfigError(f"model.attention: cudnn does not take {what}; use blocked")
        return "cudnn"
    if implementation != "auto":
        return implementation
    if backend == "gpu":
        plain = not has_bias and not remapped and variant.fused_ok
        cudnn_ok = plain and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
        return "cudnn" if cudnn_ok else "blocked"
    if backend == "cpu" and length <= REFERENCE_MAX_LENGTH:
        return "reference"
    return "blocked"


def expand_kv(x: Float[Array, "*B KV L Dh"], heads: int) -> Float[Array, "*B H L Dh"]:
    """Keys or values of KV heads repeated for H query heads: head h reads head h // (H / KV)
    (grouped-query attention; the identity when KV = H)."""
    groups = heads // x.shape[-3]
    if groups * x.shape[-3] != heads:
        raise ValueError(f"{x.shape[-3]} key/value heads do not divide {heads} query heads")
    return x if groups == 1 else jnp.repeat(x, groups, axis=-3)


def _has_bias(encoding: PositionEncoding, positions: Array) -> bool:
    """Whether the encoding adds a logit bias (asked of a 1 x 1 block, shapes only)."""
    one = positions.reshape(-1)[:1]
    return jax.eval_shape(encoding.bias, one, one) is not None


def attend_keys(
    q: Float[Array, "H Lq Dh"],
    k: Float[Array, "H Lk Dh"],
    v: Float[Array, "H Lk Dh"],
    q_positions: Int[Array, " Lq"],
    k_positions: Int[Array, " Lk"],
    visible: Bool[Array, "Lq Lk"],
    encoding: PositionEncoding,
    *,
    variant: Variant,
    scale: float,
    row_scale: Float[Array, "H Lq"] | None = None,
    q_decay: Float[Array, "H Lq"] | None = None,
    k_decay: Float[Array, "H Lk"] | None = None,
) -> Float[Array, "H Lq Dh"]:
    """Exact softmax (or the variant's normaliser) attention of queries against given keys
    (a decoding cache, keys in sequence order) with an explicit visibility mask: the encoding's
    bias of the position values, the forget gates' decay (`q_decay`, `k_decay`: the cumulative
    log gates c of the queries and keys), its contextual term, the row scale, then the mask, as
    the reference path computes them.
    k and v may have fewer heads (KV, Lk, Dh), as `attend`; under a remap q and k carry a
    leading set axis (S, H, Lq, Dh), (S, KV, Lk, Dh)."""
    k, v = expand_kv(k, q.shape[-3]), expand_kv(v, q.shape[-3])
    bias = with_decay(encoding.bias(q_positions, k_positions), q_decay, k_decay)
    choice = encoding.remap_choice(q_positions, k_positions)
    logits = block_logits(q, k, scale, bias, visible, row_scale, encoding, choice)
    weights = row_weights(logits, variant).astype(v.dtype)
    return jnp.einsum("hqk,hkd->hqd", weights, v)


# ---------------------------------------------------------------------------------------------
# reference


def reference_attention(
    q: Float[Array, "H L Dh"],
    k: Float[Array, "H L Dh"],
    v: Float[Array, "H L Dh"],
    positions: Int[Array, " L"],
    encoding: PositionEncoding | None,
    *,
    variant: Variant,
    scale: float,
    window: int | None = None,
    row_scale: Float[Array, "H L"] | None = None,
    log_decay: Float[Array, "H L"] | None = None,
) -> Float[Array, "H L Dh"]:
    """Exact softmax (with `variant`'s prior logit; the weights of its normaliser when one
    replaces softmax, hiding each query's own key if it says so) per query block over its
    causal key prefix (`memory.causal_blocks`), with the encoding's bias, the forget gates'
    decay (`log_decay`, `attention_logits.with_decay`) and the contextual term
    (`contextual_bias` of each block's logits). Under a remap q and k are (S, H, L, Dh), one
    rotation per position set."""
    blocks = reference_weights(
        q,
        k,
        positions,
        encoding,
        variant=variant,
        scale=scale,
        window=window,
        row_scale=row_scale,
        log_decay=log_decay,
    )
    outs = [
        jnp.einsum("hqk,hkd->hqd", weights.astype(v.dtype), v[:, :stop])
        for _, stop, weights in blocks
    ]
    return jnp.concatenate(outs, axis=1)


def reference_weights(
    q: Float[Array, "H L Dh"],
    k: Float[Array, "H L Dh"],
    positions: Int[Array, " L"],
    encoding: PositionEncoding | None,
    *,
    variant: Variant,
    scale: float,
    window: int | None = None,
    row_scale: Float[Array, "H L"] | None = None,
    log_decay: Float[Array, "H L"] | None = None,
) -> list[tuple[int, int, Float[Array, "H Bq Bk"]]]:
    """The reference path's attention weights, query block by query block: (start, stop,
    weights (H, stop - start, stop) of queries [start, stop) over keys [0, stop)), float32, as
    `reference_attention` applies them to the values (keys q/k as there)."""
    length = q.shape[-2]
    index = jnp.arange(length)
    out = []
    for start, stop in causal_blocks(length):
        q_pos, k_pos = positions[start:stop], positions[:stop]
        bias = None if encoding is None else encoding.bias(q_pos, k_pos)
        if log_decay is not None:
            bias = with_decay(bias, log_decay[:, start:stop], log_decay[:, :stop])
        choice = remap_choice(encoding, q_pos, k_pos)
        ok = visibility(index[start:stop], index[:stop], window, variant.own_key())
        rows = None if row_scale is None else row_scale[:, start:stop]
        qb, kb = q[..., start:stop, :], k[..., :stop, :]
        logits = block_logits(qb, kb, scale, bias, ok, rows, encoding, choice)
        out.append((start, stop, row_weights(logits, variant)))
    return out


# ---------------------------------------------------------------------------------------------
# fused (cuDNN)


def fused_attention(
    q: Float[Array, "*B H L Dh"],
    k: Float[Array, "*B H L Dh"],
    v: Float[Array, "*B H L Dh"],
    *,
    scale: float,
    window: int | None = None,
    implementation: Literal["xla", "cudnn"] | None = "cudnn",
) -> Float[Array, "*B H L Dh"]:
    """`jax.nn.dot_product_attention` (causal, optional sliding window), no bias.

    `implementation` None lets JAX pick (its XLA path on CPU, which the tests compare with the
    other implementations).
    """
    lead = q.shape[:-3]
    q, k, v = (x.reshape(-1, *x.shape[-3:]).swapaxes(1, 2) for x in (q, k, v))  # (B, L, H, Dh)
    out = jax.nn.dot_product_attention(
        q,
        k,
        v,
        scale=scale,
        is_causal=True,
        local_window_size=None if window is None else (window - 1, 0),
        implementation=implementation,
    )
    out = out.swapaxes(1, 2)  # (B, H, L, Dh)
    return out.reshape(*lead, *out.shape[1:])


__all__ = [
    "attend",
    "blocked_attention",
    "causal_blocks",
    "choose",
    "expand_kv",
    "fused_attention",
    "reference_attention",
    "reference_weights",
    "visible_keys",
]

"""Masked attention logits of a block of queries against a block of keys, as every attention
path computes them (`rope_lab.model.attention`, the blocked kernel `rope_lab.model.flash`,
KV-cache decoding through `attention.attend_keys`).

Query i sees key j when j <= i (sequence index, not position value) and, with a `window`, when
i - j < window. A block's logits are q k^T x scale plus the encoding's bias, then (reference
path only) the encoding's contextual term, then each query's `row_scale`, then the mask.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.model.attention_fns.softmax import Softmax
from rope_lab.model.positions.modules import PositionEncoding

# Logit of a masked pair: finite, so a query block whose first key block is wholly masked (a
# sliding window) gives exp(0) placeholders, which the first unmasked block scales by
# exp(MASKED - m) = 0. Every query sees at least itself, so each row meets an unmasked key.
MASKED = -1e30
CONTEXTUAL_NEEDS_REFERENCE = (
    "model.attention: {implementation} cannot add a contextual position term (CoPE): it needs "
    "each query's whole row of keys at once; use reference (or auto, which picks it)"
)


class Variant(eqx.Module):
    """What attention computes, as every path calls it: the registered variant's config
    (`model.attention_fn`, static) and its learned arrays in this layer (`init_params`)."""

    config: AttentionFnConfig = eqx.field(static=True)
    params: Any = None

    def prior_logit(self) -> Float[Array, " H"] | None:
        """(H,) log of the extra mass in each row's normaliser, or None (plain softmax)."""
        return self.config.prior_logit(self.params)

    def own_key(self) -> bool:
        """Whether query i sees key i (its normaliser's say; softmax does)."""
        normaliser = self.config.normaliser
        return normaliser is None or normaliser.own_key


SOFTMAX = Variant(Softmax())  # plain softmax: no parameters, no prior


def fused_refusal(variant: AttentionFnConfig) -> str:
    """Why the fused cuDNN path cannot compute `variant`, naming it."""
    return (
        f"model.attention: cudnn cannot compute model.attention_fn {variant.name!r} "
        "(jax.nn.dot_product_attention takes no extra normaliser term); use blocked or auto"
    )


def row_weights(logits: Float[Array, "H Bq Bk"], variant: Variant) -> Float[Array, "H Bq Bk"]:
    """Attention weights of masked logits whose rows see all their keys: softmax, with the
    variant's prior logit added to each row's normaliser when it has one, or the weights of
    the variant's own normaliser (`AttentionFnConfig.normaliser`) when it replaces softmax."""
    if variant.config.normaliser is not None:
        return variant.config.normaliser.row_weights(logits)
    prior = variant.prior_logit()
    if prior is None:
        return jax.nn.softmax(logits, axis=-1)
    lse = jnp.logaddexp(jax.nn.logsumexp(logits, axis=-1), prior[:, None])
    return jnp.exp(logits - lse[..., None])


def visible_keys(length: int, window: int | None = None) -> Bool[Array, "L L"]:
    """(L, L) bool: key j visible from query i (j <= i, and i - j < window), as attention masks."""
    index = jnp.arange(length)
    return visibility(index, index, window)


def visibility(
    q_index: Array, k_index: Array, window: int | None, own_key: bool = True
) -> Bool[Array, "Lq Lk"]:
    """(Lq, Lk) bool: key j visible from query i (j <= i, or j < i without `own_key`; and
    i - j < window)."""
    k, q = k_index[None, :], q_index[:, None]
    ok = k <= q if own_key else k < q
    if window is not None:
        ok = ok & (k > q - window)
    return ok


def raw_logits(
    q: Array, k: Array, scale: float, bias: Array | None, choice: Array | None = None
) -> Float[Array, "H Bq Bk"]:
    """Unmasked, unscaled-by-row float32 logits of queries (H, Bq, Dh) against keys (H, Bk, Dh).

    Under a relative-position remap q and k hold one rotation per position set, (S, H, B, Dh),
    and `choice` (Bq, Bk) picks the set each pair's logit comes from."""
    s = jnp.einsum("...hqd,...hkd->...hqk", q, k, preferred_element_type=jnp.float32) * scale
    if choice is not None:
        s = chosen(s, choice)
    return s if bias is None else s + bias


def with_decay(
    bias: Array | None, q_decay: Float[Array, "H Bq"] | None, k_decay: Float[Array, "H Bk"] | None
) -> Array | None:
    """`bias` plus a forget gate's decay c_i - c_j of each pair (FoX: c the cumulative sum of
    the log forget gates over the sequence, so c_i - c_j = sum_{l=j+1..i} log f_l <= 0), as
    (H, Bq, Bk); `bias` itself without one."""
    if q_decay is None or k_decay is None:
        return bias
    decay = q_decay[:, :, None] - k_decay[:, None, :]
    return decay if bias is None else bias + decay


def chosen(per_set: Float[Array, "S H Bq Bk"], choice: Array) -> Float[Array, "H Bq Bk"]:
    """Each pair's value from the set `choice` (Bq, Bk) names."""
    out = per_set[0]
    for s in range(1, per_set.shape[0]):
        out = jnp.where(choice[None] == s, per_set[s], out)
    return out


def per_set(x: Float[Array, "H Bq Bk"], choice: Array, n_sets: int) -> Float[Array, "S H Bq Bk"]:
    """x split by set: entry s keeps the pairs `choice` (Bq, Bk) puts in set s, zero elsewhere
    (the transpose of `chosen`)."""
    return jnp.stack([jnp.where(choice[None] == s, x, 0.0) for s in range(n_sets)])


def block_logits(
    q: Array,
    k: Array,
    scale: float,
    bias: Array | None,
    ok: Array,
    row_scale: Array | None,
    contextual: PositionEncoding | None = None,
    choice: Array | None = None,
) -> Float[Array, "H Bq Bk"]:
    """Masked float32 logits of queries (H, Bq, Dh) against keys (H, Bk, Dh), each query's row
    times `row_scale` (H, Bq) when given. With `contextual` (the reference path, keys the whole
    causal prefix) its `contextual_bias` of these logits is added first. Under a remap q and k
    are (S, H, B, Dh) and `choice` (Bq, Bk) picks each pair's set (`raw_logits`)."""
    s = raw_logits(q, k, scale, bias, choice)
    if contextual is not None:
        term = contextual.contextual_bias(q, s, ok)
        s = s if term is None else s + term
    if row_scale is not None:
        s = s * row_scale[..., None]
    return jnp.where(ok[None], s, MASKED)


def remap_choice(
    encoding: PositionEncoding | None, q_positions: Array, k_positions: Array
) -> Array | None:
    """The (Lq, Lk) position set of each pair under a remap, else None."""
    return None if encoding is None else encoding.remap_choice(q_positions, k_positions)


def has_remap(encoding: PositionEncoding, positions: Array) -> bool:
    """Whether the encoding scores pairs in several position sets (shapes only)."""
    one = positions.reshape(-1)[:1]
    return jax.eval_shape(encoding.remap_choice, one, one) is not None


def has_contextual(encoding: PositionEncoding, q: Array) -> bool:
    """Whether the encoding adds a contextual term (asked of one query and key, shapes only)."""
    heads, dh = q.shape[-3], q.shape[-1]
    one_q = jax.ShapeDtypeStruct((heads, 1, dh), q.dtype)
    one_logit = jax.ShapeDtypeStruct((heads, 1, 1), jnp.float32)
    one_pair = jax.ShapeDtypeStruct((1, 1), jnp.bool_)
    return jax.eval_shape(encoding.contextual_bias, one_q, one_logit, one_pair) is not None


__all__ = [
    "CONTEXTUAL_NEEDS_REFERENCE",
    "MASKED",
    "SOFTMAX",
    "Variant",
    "block_logits",
    "chosen",
    "fused_refusal",
    "has_contextual",
    "has_remap",
    "per_set",
    "raw_logits",
    "remap_choice",
    "row_weights",
    "visibility",
    "visible_keys",
    "with_decay",
]

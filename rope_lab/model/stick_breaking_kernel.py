"""Stick-breaking attention in (block x block) tiles, linear memory forward and backward (custom
VJP), and the dense weights of a row (`stick_weights`): what the normaliser of
`model.attention_fn: stick_breaking` computes (`attention_fns.stick_breaking`) on the blocked
path and on the reference path and in cached decoding.

Query i weighs key j < i by A_ij = sigmoid(z_ij) prod_{j<l<i} sigmoid(-z_il) and reads
o_i = sum_j A_ij v_j, with no normaliser. In log space, with ls = log sigmoid,

    log A_ij = ls(z_ij) + sum_{j<l<i} ls(-z_il),

every term <= 0, so no exp of a positive number is ever taken. Transcendentals are most of the
cost on a CPU, so ls(z) is taken as z + ls(-z) (one softplus a logit in the forward) and the
backward draws ls(-z), sigmoid(-z) and sigmoid(z) from one exp and one log1p (`_shares`).

The forward visits a query block's key blocks from its own block backwards (right to left),
carrying each row's sum of ls(-z) over the keys already visited (the nearer ones); inside a
tile the nearer keys' sum is a reverse cumulative sum. The backward, with ds_ij = A_ij
(do_i . v_j) the gradient of log A_ij:

    dz_ij = ds_ij sigmoid(-z_ij) - sigmoid(z_ij) sum_{j'<j} ds_ij',

z_ij breaking the stick of every farther key j' < j. Per query block it first walks right to
left recording, per key block, each row's sum of ls(-z) over the keys after it (H x L floats,
linear), then left to right carrying the farther keys' sum of ds. (A row's ds sum to
delta_i = do_i . o_i, but delta_i less the nearer keys' sum loses the far keys' small sums to
rounding, and every far key's sigmoid(z) multiplies that error.) Logits are the blocked
kernel's (`attention_logits.block_logits`: the encoding's bias, the row scale, a remap's sets);
a masked pair has logit MASKED, sigmoid 0: no weight and no break. Keys j >= i are masked
(`visibility(own_key=False)`), and a window keeps i - j < window.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model.attention_logits import (
    MASKED,
    block_logits,
    raw_logits,
    remap_choice,
    visibility,
)
from rope_lab.model.flash import (
    BlockPlan,
    bias_and_vjp,
    encoding_arrays,
    qk_axis,
    through_bias,
    tile_bias,
    tiles,
    to_queries_and_keys,
    untile,
)
from rope_lab.model.positions.modules import PositionEncoding


def stick_breaking_attention(
    q: Float[Array, "H L Dh"],
    k: Float[Array, "H L Dh"],
    v: Float[Array, "H L Dh"],
    encoding: PositionEncoding | None,
    row_scale: Float[Array, "H L"] | None,
    positions: Int[Array, " L"],
    plan: BlockPlan,
) -> Float[Array, "H L Dh"]:
    """Stick-breaking outputs (H, L, Dh) of a sequence padded to whole blocks (`plan`); under a
    remap q and k are (S, H, L, Dh)."""
    return _stick((q, k, v, encoding, row_scale), positions, plan)


def stick_weights(logits: Float[Array, "H Bq Bk"]) -> Float[Array, "H Bq Bk"]:
    """Stick-breaking weights of masked logits, keys in sequence order, each row holding all
    its visible keys: A_ij = sigmoid(z_ij) prod_{l > j} sigmoid(-z_il), in log space
    (`log_stick_weights`). A masked logit (MASKED) has sigmoid 0: no weight, no break."""
    return jnp.exp(log_stick_weights(logits, jnp.zeros(logits.shape[:-1], logits.dtype))[0])


def log_stick_weights(
    logits: Float[Array, "H Bq Bk"], kept: Float[Array, "H Bq"]
) -> tuple[Float[Array, "H Bq Bk"], Float[Array, "H Bq"]]:
    """log A_ij = log sigmoid(z_ij) + sum over the nearer keys l > j of log sigmoid(-z_il) of a
    tile of masked logits, given each row's sum `kept` of log sigmoid(-z) over the keys after
    the tile; and that sum with the tile's keys added. Every term is <= 0."""
    return _log_weights(logits, jax.nn.log_sigmoid(-logits), kept)


def _log_weights(logits, log_keep, kept):
    """`log_stick_weights` given log_keep = log sigmoid(-z), the share of the stick each key
    leaves: log sigmoid(z) = z + log sigmoid(-z), one softplus for both (an absolute error of
    ulp(z) in log A, a relative one in A)."""
    farther = jnp.concatenate([log_keep[..., 1:], jnp.zeros_like(log_keep[..., :1])], axis=-1)
    nearer = jax.lax.cumsum(farther, axis=logits.ndim - 1, reverse=True) + kept[..., None]
    return logits + log_keep + nearer, kept + log_keep.sum(-1)


def _shares(z):
    """log sigmoid(-z), sigmoid(-z) and sigmoid(z) from one exp and one log1p of e = exp(-|z|)
    (the backward's transcendentals are most of its time on a CPU)."""
    e = jnp.exp(-jnp.abs(z))
    r = 1.0 / (1.0 + e)
    positive = z >= 0
    return (
        -(jnp.maximum(z, 0.0) + jnp.log1p(e)),
        jnp.where(positive, e * r, r),
        jnp.where(positive, r, e * r),
    )


def _mask(plan: BlockPlan, i: Array, j: Array) -> Array:
    """(block, block) visibility of key block j from query block i, own key hidden."""
    offsets = jnp.arange(plan.block)
    return visibility(i * plan.block + offsets, j * plan.block + offsets, plan.window, False)


def _right_to_left(plan: BlockPlan, i: Array, body, init):
    """`body(j, carry)` over the key blocks query block i sees, nearest (j = i) first."""
    first, stop = plan.key_blocks(i)
    return jax.lax.fori_loop(0, stop - first, lambda t, carry: body(stop - 1 - t, carry), init)


def _forward(q, k, v, encoding, row_scale, positions, plan: BlockPlan):
    """Outputs (H, L, Dh) of the padded sequence."""
    qt, kt = (tiles(x, plan, qk_axis(plan)) for x in (q, k))
    vt = tiles(v, plan)
    rt = None if row_scale is None else tiles(row_scale, plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    heads, dh = q.shape[-3], v.shape[-1]

    def query_block(_, i):
        logits = _tile_logits(qt[i], kt, None if rt is None else rt[i], encoding, pt, plan, i)

        def key_block(j, carry):
            kept, acc = carry
            log_a, kept = log_stick_weights(logits(j), kept)
            av = jnp.einsum(
                "hqk,hkd->hqd",
                jnp.exp(log_a).astype(vt.dtype),
                vt[j],
                preferred_element_type=jnp.float32,
            )
            return kept, acc + av

        init = (
            jnp.zeros((heads, plan.block), jnp.float32),
            jnp.zeros((heads, plan.block, dh), jnp.float32),
        )
        _, acc = _right_to_left(plan, i, key_block, init)
        return None, acc.astype(v.dtype)

    _, out = jax.lax.scan(query_block, None, jnp.arange(plan.n_blocks))
    return untile(out)


def _tile_logits(qi, kt, ri, encoding, pt, plan: BlockPlan, i):
    """j -> the masked logits (H, block, block) of query block i against key block j."""

    def logits(j):
        bias = tile_bias(encoding, pt[i], pt[j])
        choice = remap_choice(encoding, pt[i], pt[j])
        return block_logits(qi, kt[j], plan.scale, bias, _mask(plan, i, j), ri, None, choice)

    return logits


def _backward(q, k, v, encoding, row_scale, positions, plan: BlockPlan, d_out):
    """Gradients of (q, k, v, encoding, row_scale) from recomputed tiles (module docstring).
    Per query block, a first pass right to left records each key block's sum of ls(-z) over
    the keys after it; the second, left to right, carries the farther keys' sum of ds, each a
    sum of terms of its own (no difference of large sums). With a row scale r the logits are
    r * z: dz = r * dx and dr = rowsum(dx * z), dx the gradient of the scaled logits."""
    qt, kt = (tiles(x, plan, qk_axis(plan)) for x in (q, k))
    vt, dot = (tiles(x, plan) for x in (v, d_out))
    rt = None if row_scale is None else tiles(row_scale, plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    params, static, d_params0 = encoding_arrays(encoding)

    def query_block(carry, i):
        dk, dv, d_params = carry
        qi, doi = qt[i], dot[i]
        ri = None if rt is None else rt[i]
        logits = _tile_logits(qi, kt, ri, encoding, pt, plan, i)
        row0 = jnp.zeros(doi.shape[:-1], jnp.float32)

        def after_block(j, carry):
            kept, kept_after = carry
            kept_after = kept_after.at[j].set(kept)
            return kept + jax.nn.log_sigmoid(-logits(j)).sum(-1), kept_after

        kept_after0 = jnp.zeros((plan.n_blocks, *row0.shape), jnp.float32)
        _, kept_after = _right_to_left(plan, i, after_block, (row0, kept_after0))

        def key_block(j, inner):
            dq, dk, dv, d_params, dr, farther_ds = inner
            ok = _mask(plan, i, j)
            bias, bias_vjp = bias_and_vjp(plan, params, static, pt[i], pt[j])
            choice = remap_choice(encoding, pt[i], pt[j])
            z = raw_logits(qi, kt[j], plan.scale, bias, choice)
            s = jnp.where(ok[None], z if ri is None else z * ri[..., None], MASKED)
            log_keep, keep, take = _shares(s)
            a = jnp.exp(_log_weights(s, log_keep, kept_after[j])[0])
            dv_j = jnp.einsum(
                "hqk,hqd->hkd", a.astype(doi.dtype), doi, preferred_element_type=jnp.float32
            )
            da = jnp.einsum("hqd,hkd->hqk", doi, vt[j], preferred_element_type=jnp.float32)
            ds = a * da
            before = jnp.cumsum(ds, axis=2)
            before = jnp.concatenate([jnp.zeros_like(before[..., :1]), before[..., :-1]], -1)
            dx = ds * keep - take * (farther_ds[..., None] + before)
            dx = jnp.where(ok[None], dx, 0.0)
            farther_ds = farther_ds + ds.sum(-1)
            dx, d_params, dr = through_bias(dx, z, ok, ri, bias_vjp, d_params, dr)
            dq_i, dk_j = to_queries_and_keys(dx, plan, choice, qi, kt[j])
            return dq + dq_i, dk.at[j].add(dk_j), dv.at[j].add(dv_j), d_params, dr, farther_ds

        dq0 = jnp.zeros(qi.shape, jnp.float32)
        dq, dk, dv, d_params, dr, _ = jax.lax.fori_loop(
            *plan.key_blocks(i), key_block, (dq0, dk, dv, d_params, row0, row0)
        )
        return (dk, dv, d_params), (dq, dr)

    zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
    (dk, dv, d_params), (dq, dr) = jax.lax.scan(
        query_block, (zeros(kt), zeros(vt), d_params0), jnp.arange(plan.n_blocks)
    )
    axis = qk_axis(plan)
    return (
        untile(dq, axis).astype(q.dtype),
        untile(dk, axis).astype(k.dtype),
        untile(dv).astype(v.dtype),
        d_params,
        None if row_scale is None else untile(dr),
    )


@eqx.filter_custom_vjp
def _stick(operands, positions, plan):
    return _forward(*operands, positions, plan)


@_stick.def_fwd
def _stick_fwd(perturbed, operands, positions, plan):
    return _forward(*operands, positions, plan), None


@_stick.def_bwd
def _stick_bwd(residuals, d_out, perturbed, operands, positions, plan):
    return _backward(*operands, positions, plan, d_out)


__all__ = ["log_stick_weights", "stick_breaking_attention", "stick_weights"]

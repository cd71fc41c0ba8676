"""The blocked attention kernel: online softmax (flash) in (block x block) tiles.

Per query block, a loop over key blocks carries the running max, normaliser and output; blocks
wholly above the diagonal or outside the window are never visited (`BlockPlan.key_blocks`). A
custom VJP recomputes each block's logits from the saved per-row log-sum-exp, so training
memory is linear in L as well as the forward. Bias parameters (KERPLE's r1, a T5 table) get
their gradients through the encoding's own `bias`, block by block. A per-query `row_scale`
(H, L) multiplies each logit row, bias included; its gradient is rowsum(dS * z). A forget
gate's cumulative log gates c (H, L) add c_i - c_j to each pair's logit (FoX); their gradient
is rowsum(dZ) - colsum(dZ), dZ the gradient of the logits before the row scale. Under a
relative-position remap q and k hold one rotation per position set, (S, H, L, Dh): each tile
computes its S logits and keeps the set `encoding.remap_choice` names per pair, and the
backward pass sends each pair's dS to its set's dq and dk (`attention_logits.per_set`).
`rope_lab.model.attention.attend` picks this kernel (`blocked`, or `auto` past the reference
path's lengths); it cannot add a contextual term (CoPE), which needs a query's whole row.
A variant whose `normaliser` replaces softmax runs its own kernel (`Normaliser.blocked`) on
the padded sequence and this module's `BlockPlan`, reusing its tiling and bias helpers.

The custom VJP's own residuals, the output and the per-row log-sum-exp, carry the names
`KERNEL_RESIDUALS` (`jax.ad_checkpoint.checkpoint_name`), so a rematerialisation policy can keep
them and never rerun the O(L^2) forward in the backward (`train.remat: attention`).
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jaxtyping import Array, Float, Int

from rope_lab.config import ConfigError
from rope_lab.model.attention_logits import (
    CONTEXTUAL_NEEDS_REFERENCE,
    MASKED,
    Variant,
    block_logits,
    has_contextual,
    per_set,
    raw_logits,
    remap_choice,
    visibility,
    with_decay,
)
from rope_lab.model.memory import BLOCK
from rope_lab.model.positions.modules import PositionEncoding

# names of the softmax kernel's residuals: its output (H, L, Dh) and log-sum-exp (H, L)
KERNEL_RESIDUALS = ("flash_output", "flash_lse")


@dataclass(frozen=True)
class BlockPlan:
    """Static layout of one blocked call: block size, number of blocks, scale, window, whether
    the encoding adds a bias, and the position sets of q and k (0: no remap)."""

    block: int
    n_blocks: int
    scale: float
    window: int | None
    has_bias: bool = False
    sets: int = 0

    def key_blocks(self, i: Array) -> tuple[Array, Array]:
        """[first, stop) of the key blocks query block i sees: those with a visible pair."""
        if self.window is None:
            first = jnp.zeros_like(i)
        else:
            first = jnp.maximum(0, (i * self.block - self.window + 1) // self.block)
        return first, i + 1

    def mask(self, i: Array, j: Array) -> Array:
        """(block, block) visibility of key block j from query block i."""
        offsets = jnp.arange(self.block)
        return visibility(i * self.block + offsets, j * self.block + offsets, self.window)


def blocked_attention(
    q: Float[Array, "H L Dh"],
    k: Float[Array, "H L Dh"],
    v: Float[Array, "H L Dh"],
    positions: Int[Array, " L"],
    encoding: PositionEncoding | None,
    *,
    variant: Variant,
    scale: float,
    window: int | None = None,
    block: int | None = None,
    row_scale: Float[Array, "H L"] | None = None,
    log_decay: Float[Array, "H L"] | None = None,
) -> Float[Array, "H L Dh"]:
    """Online-softmax attention in (block x block) tiles, linear memory forward and backward.

    L need not be a multiple of `block`: the sequence is padded at the end (padded keys lie
    after every real query, so causality hides them; padded queries are dropped). `block`
    defaults to BLOCK. Under a remap q and k are (S, H, L, Dh).
    """
    if encoding is not None and has_contextual(encoding, q):
        raise ConfigError(CONTEXTUAL_NEEDS_REFERENCE.format(implementation="blocked"))
    length = v.shape[1]
    block = min(block or BLOCK, length)
    n_blocks = -(-length // block)
    pad = n_blocks * block - length
    if pad:
        q, k, v = (_pad(x, pad, axis=x.ndim - 2) for x in (q, k, v))
        positions = jnp.pad(positions, (0, pad), mode="edge")
        if row_scale is not None:
            row_scale = jnp.pad(row_scale, ((0, 0), (0, pad)), constant_values=1.0)
        if log_decay is not None:  # padded keys follow every real query: masked either way
            log_decay = jnp.pad(log_decay, ((0, 0), (0, pad)))
    one = positions[:1]
    has_bias = encoding is not None and jax.eval_shape(encoding.bias, one, one) is not None
    sets = q.shape[0] if q.ndim == 4 else 0
    plan = BlockPlan(block, n_blocks, float(scale), window, has_bias, sets)
    normaliser = variant.config.normaliser
    if normaliser is None:
        out = _flash((q, k, v, encoding, row_scale, variant, log_decay), positions, plan)
    else:
        out = normaliser.blocked(q, k, v, encoding, row_scale, positions, plan)
    return out[:, :length]


def _pad(x: Array, pad: int, *, axis: int) -> Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def tiles(x: Array, plan: BlockPlan, axis: int = 1) -> Array:
    """(*pre, L, *rest) -> (n_blocks, *pre, block, *rest), L at `axis`."""
    tiled = x.reshape(*x.shape[:axis], plan.n_blocks, plan.block, *x.shape[axis + 1 :])
    return jnp.moveaxis(tiled, axis, 0)


def untile(x: Array, axis: int = 1) -> Array:
    """(n_blocks, *pre, block, *rest) -> (*pre, L, *rest), L at `axis`."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(*x.shape[:axis], -1, *x.shape[axis + 2 :])


def qk_axis(plan: BlockPlan) -> int:
    """The length axis of q and k: 2 under a remap (S, H, L, Dh), else 1."""
    return 2 if plan.sets else 1


def tile_bias(encoding: PositionEncoding | None, q_positions: Array, k_positions: Array):
    return None if encoding is None else encoding.bias(q_positions, k_positions)


def _forward(q, k, v, encoding, row_scale, variant, log_decay, positions, plan: BlockPlan):
    """Outputs (H, L, Dh) and per-row log-sum-exp (H, L) of the padded sequence. Each row's
    online-softmax state starts empty (max MASKED, normaliser 0), or at the variant's prior
    logit (max = prior, normaliser = 1: a key of zero value)."""
    qt, kt = (tiles(x, plan, qk_axis(plan)) for x in (q, k))
    vt = tiles(v, plan)
    rt = None if row_scale is None else tiles(row_scale, plan)
    ct = None if log_decay is None else tiles(log_decay, plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    heads, dh = q.shape[-3], v.shape[-1]
    prior = variant.prior_logit()
    if prior is None:
        m0 = jnp.full((heads, plan.block), MASKED, jnp.float32)
        norm0 = jnp.zeros((heads, plan.block), jnp.float32)
    else:
        m0 = jnp.broadcast_to(prior.astype(jnp.float32)[:, None], (heads, plan.block))
        norm0 = jnp.ones((heads, plan.block), jnp.float32)

    def query_block(_, i):
        qi = qt[i]
        ri = None if rt is None else rt[i]

        def key_block(j, carry):
            m, norm, acc = carry
            bias = _decayed(tile_bias(encoding, pt[i], pt[j]), ct, i, j)
            choice = remap_choice(encoding, pt[i], pt[j])
            s = block_logits(qi, kt[j], plan.scale, bias, plan.mask(i, j), ri, None, choice)
            m_new = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - m_new[..., None])
            correction = jnp.exp(m - m_new)
            norm = norm * correction + p.sum(-1)
            pv = jnp.einsum(
                "hqk,hkd->hqd", p.astype(vt.dtype), vt[j], preferred_element_type=jnp.float32
            )
            return m_new, norm, acc * correction[..., None] + pv

        init = (m0, norm0, jnp.zeros((heads, plan.block, dh), jnp.float32))
        m, norm, acc = jax.lax.fori_loop(*plan.key_blocks(i), key_block, init)
        return None, ((acc / norm[..., None]).astype(v.dtype), m + jnp.log(norm))

    _, (out, lse) = jax.lax.scan(query_block, None, jnp.arange(plan.n_blocks))
    return untile(out), untile(lse)


def _backward(
    q, k, v, encoding, row_scale, variant, log_decay, positions, plan: BlockPlan, out, lse, d_out
):
    """Gradients of (q, k, v, encoding, row_scale, variant, log_decay) from recomputed block
    logits (the flash backward). With a row scale r the logits are r * z: dz = r * dS and
    dr = rowsum(dS * z); a decay c_i - c_j in z gives dc = rowsum(dz) - colsum(dz). A prior
    logit p (a zero-value key in every row's normaliser) leaves dS as it is and gets
    dp = -sum_i exp(p - lse_i) delta_i (`_variant_grads`)."""
    qt, kt = (tiles(x, plan, qk_axis(plan)) for x in (q, k))
    vt, dot = (tiles(x, plan) for x in (v, d_out))
    rt = None if row_scale is None else tiles(row_scale, plan)
    ct = None if log_decay is None else tiles(log_decay, plan)
    lset = tiles(lse, plan)
    delta = tiles(jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1), plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    params, static, d_params0 = encoding_arrays(encoding)

    def query_block(carry, i):
        dk, dv, d_params, dck = carry
        qi, doi = qt[i], dot[i]
        ri = None if rt is None else rt[i]

        def key_block(j, inner):
            dq, dk, dv, d_params, dr, dcq, dck = inner
            ok = plan.mask(i, j)
            bias, bias_vjp = bias_and_vjp(plan, params, static, pt[i], pt[j])
            choice = remap_choice(encoding, pt[i], pt[j])
            z = raw_logits(qi, kt[j], plan.scale, _decayed(bias, ct, i, j), choice)
            s = jnp.where(ok[None], z if ri is None else z * ri[..., None], MASKED)
            p = jnp.exp(s - lset[i][..., None])  # 0 where masked
            dv_j = jnp.einsum(
                "hqk,hqd->hkd", p.astype(doi.dtype), doi, preferred_element_type=jnp.float32
            )
            dp = jnp.einsum("hqd,hkd->hqk", doi, vt[j], preferred_element_type=jnp.float32)
            ds = p * (dp - delta[i][..., None])
            ds, d_params, dr = through_bias(ds, z, ok, ri, bias_vjp, d_params, dr)
            if ct is not None:  # masked pairs have ds = 0
                dcq = dcq + ds.sum(-1)
                dck = dck.at[j].add(-ds.sum(-2))
            dq_i, dk_j = to_queries_and_keys(ds, plan, choice, qi, kt[j])
            return dq + dq_i, dk.at[j].add(dk_j), dv.at[j].add(dv_j), d_params, dr, dcq, dck

        dq0 = jnp.zeros(qi.shape, jnp.float32)
        dr0 = jnp.zeros(doi.shape[:-1], jnp.float32)
        dq, dk, dv, d_params, dr, dcq, dck = jax.lax.fori_loop(
            *plan.key_blocks(i), key_block, (dq0, dk, dv, d_params, dr0, dr0, dck)
        )
        return (dk, dv, d_params, dck), (dq, dr, dcq)

    zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
    dck0 = zeros(lset)  # (n_blocks, H, block): each key's -colsum(dz)
    (dk, dv, d_params, dck), (dq, dr, dcq) = jax.lax.scan(
        query_block, (zeros(kt), zeros(vt), d_params0, dck0), jnp.arange(plan.n_blocks)
    )
    axis = qk_axis(plan)
    grads = (
        untile(dq, axis).astype(q.dtype),
        untile(dk, axis).astype(k.dtype),
        untile(dv).astype(v.dtype),
    )
    d_variant = _variant_grads(variant, lse, d_out, out)
    d_decay = None if log_decay is None else untile(dcq) + untile(dck)
    return (*grads, d_params, None if row_scale is None else untile(dr), d_variant, d_decay)


def encoding_arrays(encoding: PositionEncoding | None):
    """(learned arrays, the rest, zero gradients of the arrays) of the encoding, for a
    backward pass that differentiates its bias block by block; Nones without an encoding."""
    if encoding is None:
        return None, None, None
    params, static = eqx.partition(encoding, eqx.is_inexact_array)
    return params, static, jax.tree.map(jnp.zeros_like, params)


def bias_and_vjp(plan: BlockPlan, params, static, q_pos: Array, k_pos: Array):
    """The encoding's bias (H, Bq, Bk) of one block and its VJP to the encoding's arrays;
    (None, None) when the plan has no bias."""
    if not plan.has_bias:
        return None, None
    return jax.vjp(lambda p: eqx.combine(p, static).bias(q_pos, k_pos), params)


def through_bias(ds: Array, z: Array, ok: Array, ri: Array | None, bias_vjp, d_params, dr):
    """A block's logit cotangent ds (H, Bq, Bk) back through each query's row scale `ri`
    (H, Bq; its gradient added to `dr`) and the encoding's bias (`bias_vjp`; added to
    `d_params`): (the cotangent of scale q.k + bias, d_params, dr)."""
    if ri is not None:
        dr = dr + jnp.sum(jnp.where(ok[None], ds * z, 0.0), -1)
        ds = ds * ri[..., None]
    if bias_vjp is not None:
        (d_bias,) = bias_vjp(ds)
        d_params = jax.tree.map(jnp.add, d_params, d_bias)
    return ds, d_params, dr


def to_queries_and_keys(ds: Array, plan: BlockPlan, choice, qi: Array, kj: Array):
    """The cotangent ds (H, Bq, Bk) of a block's scale q.k + bias as (dq (H, Bq, Dh) of its
    queries, dk (H, Bk, Dh) of its keys); under a remap each pair's ds goes to the position set
    its logit came from (`per_set`)."""
    ds = ds * plan.scale
    if choice is not None:
        ds = per_set(ds, choice, plan.sets)
    dq = jnp.einsum(
        "...hqk,...hkd->...hqd", ds.astype(kj.dtype), kj, preferred_element_type=jnp.float32
    )
    dk = jnp.einsum(
        "...hqk,...hqd->...hkd", ds.astype(qi.dtype), qi, preferred_element_type=jnp.float32
    )
    return dq, dk


def _decayed(bias: Array | None, ct: Array | None, i: Array, j: Array) -> Array | None:
    """The tile's bias plus the decay c_i - c_j of query block i and key block j."""
    return bias if ct is None else with_decay(bias, ct[i], ct[j])


def _variant_grads(variant: Variant, lse: Array, d_out: Array, out: Array):
    """The variant's parameter gradients through its prior logit c (H,): each row i's
    normaliser holds exp(c), so dL/dc = -sum_i exp(c - lse_i) delta_i, delta_i = do_i . o_i
    (padded rows have do_i = 0); then through `prior_logit` by its own VJP."""
    params, static = eqx.partition(variant, eqx.is_inexact_array)
    if variant.prior_logit() is None:
        return jax.tree.map(jnp.zeros_like, params)
    prior, vjp = jax.vjp(lambda p: eqx.combine(p, static).prior_logit(), params)
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1)
    d_prior = -jnp.sum(jnp.exp(prior[:, None] - lse) * delta, axis=-1)
    (grads,) = vjp(d_prior.astype(prior.dtype))
    return grads


@eqx.filter_custom_vjp
def _flash(operands, positions, plan):
    return _forward(*operands, positions, plan)[0]


@_flash.def_fwd
def _flash_fwd(perturbed, operands, positions, plan):
    out, lse = _forward(*operands, positions, plan)
    output_name, lse_name = KERNEL_RESIDUALS
    out, lse = checkpoint_name(out, output_name), checkpoint_name(lse, lse_name)
    return out, (out, lse)


@_flash.def_bwd
def _flash_bwd(residuals, d_out, perturbed, operands, positions, plan):
    out, lse = residuals
    return _backward(*operands, positions, plan, out, lse, d_out)


__all__ = ["KERNEL_RESIDUALS", "blocked_attention"]

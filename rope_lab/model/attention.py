"""Causal self-attention of heads-major operands, by one of three implementations.

`attend(q, k, v, positions, encoding, ...)` takes queries and keys already rotated by the
position encoding, shape (*B, H, L, Dh), and asks the encoding for its additive logit bias
block by block (`encoding.bias(q_positions, k_positions)`), so no implementation builds an
(H, L, L) bias. Query i attends key j when j <= i (sequence index, not position value) and, with
a `window`, when i - j < window. An optional `row_scale` (*B, H, L) multiplies query i's whole
logit row, bias included, before the softmax: attention temperature (Scalable-Softmax, Llama 4's
query scaling, zero-shot log-length scaling) for every implementation and encoding.

- `reference`: each query block against its whole causal key prefix, exact softmax, autodiff
  backward. Fastest on CPU at short lengths; memory grows with L^2. The only implementation
  that sees a query's whole row of keys at once, so the only one that runs an encoding's
  `contextual_bias` (CoPE), which it adds to each block's logits before the row scale and mask.
- `blocked`: the online-softmax (flash) formulation. Per query block, a loop over key blocks
  carries the running max, normaliser and output; blocks wholly above the diagonal or outside
  the window are never visited. A custom VJP recomputes each block's logits from the saved
  per-row log-sum-exp, so training memory is linear in L too. Bias parameters (KERPLE's r1, a
  T5 table) get their gradients through the encoding's own `bias`, block by block.
- `cudnn`: `jax.nn.dot_product_attention` with the cuDNN kernel (GPU; float16/bfloat16; for
  encodings without a bias hook).

`auto` picks, at trace time, from the backend, the dtype, the encoding and the length
(`choose`). On TPU `auto` runs `blocked` (Pallas' splash kernels are not wired in). An encoding
with a contextual term runs `reference` at every length, on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from rope_lab.config import ATTENTION_IMPLEMENTATIONS, ConfigError
from rope_lab.model.memory import BLOCK, REFERENCE_MAX_LENGTH, causal_blocks
from rope_lab.model.positions import PositionEncoding

# Logit of a masked pair: finite, so a query block whose first key block is wholly masked (a
# sliding window) gives exp(0) placeholders, which the first unmasked block scales by
# exp(MASKED - m) = 0. Every query sees at least itself, so each row meets an unmasked key.
MASKED = -1e30
CONTEXTUAL_NEEDS_REFERENCE = (
    "model.attention: {implementation} cannot add a contextual position term (CoPE): it needs "
    "each query's whole row of keys at once; use reference (or auto, which picks it)"
)


def attend(
    q: Float[Array, "*B H L Dh"],
    k: Float[Array, "*B H L Dh"],
    v: Float[Array, "*B H L Dh"],
    positions: Int[Array, "*B L"],
    encoding: PositionEncoding,
    *,
    scale: float,
    implementation: str = "auto",
    window: int | None = None,
    row_scale: Float[Array, "*B H L"] | None = None,
) -> Float[Array, "*B H L Dh"]:
    """Causal attention outputs (*B, H, L, Dh) by `implementation` (see the module docstring).

    `row_scale` (broadcastable to (*B, H, L)) multiplies each query's logits, bias included.
    """
    has_bias = _has_bias(encoding, positions)
    contextual = _has_contextual(encoding, q)
    chosen = choose(implementation, q.shape[-2], q.dtype, has_bias=has_bias, contextual=contextual)
    if row_scale is not None:
        row_scale = jnp.broadcast_to(row_scale, q.shape[:-1]).astype(jnp.float32)
    if chosen == "cudnn":
        if row_scale is not None:  # no bias: scaling the logits is scaling the queries
            q = (q * row_scale[..., None]).astype(q.dtype)
        return fused_attention(q, k, v, scale=scale, window=window, implementation="cudnn")
    one = reference_attention if chosen == "reference" else blocked_attention
    bias_encoding = encoding if has_bias or contextual else None

    def per_sequence(q, k, v, positions, row_scale):
        return one(
            q, k, v, positions, bias_encoding, scale=scale, window=window, row_scale=row_scale
        )

    for _ in range(q.ndim - 3):
        per_sequence = jax.vmap(per_sequence)
    return per_sequence(q, k, v, positions, row_scale)


def choose(
    implementation: str, length: int, dtype, *, has_bias: bool, contextual: bool = False
) -> str:
    """The implementation `auto` resolves to (or `implementation` itself, checked).

    A contextual term (`contextual`): reference, at any length. Otherwise GPU: cuDNN where it
    applies (16-bit operands, no bias), else blocked. TPU: blocked. CPU: reference up to
    REFERENCE_MAX_LENGTH, blocked beyond.
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
    if implementation == "cudnn":
        if backend != "gpu":
            raise ConfigError(f"model.attention: cudnn needs a CUDA GPU; the backend is {backend}")
        if has_bias:
            raise ConfigError("model.attention: cudnn does not take a position bias; use blocked")
        return "cudnn"
    if implementation != "auto":
        return implementation
    if backend == "gpu":
        cudnn_ok = not has_bias and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
        return "cudnn" if cudnn_ok else "blocked"
    if backend == "cpu" and length <= REFERENCE_MAX_LENGTH:
        return "reference"
    return "blocked"


def _has_bias(encoding: PositionEncoding, positions: Array) -> bool:
    """Whether the encoding adds a logit bias (asked of a 1 x 1 block, shapes only)."""
    one = positions.reshape(-1)[:1]
    return jax.eval_shape(encoding.bias, one, one) is not None


def _has_contextual(encoding: PositionEncoding, q: Array) -> bool:
    """Whether the encoding adds a contextual term (asked of one query and key, shapes only)."""
    heads, dh = q.shape[-3], q.shape[-1]
    one_q = jax.ShapeDtypeStruct((heads, 1, dh), q.dtype)
    one_logit = jax.ShapeDtypeStruct((heads, 1, 1), jnp.float32)
    one_pair = jax.ShapeDtypeStruct((1, 1), jnp.bool_)
    return jax.eval_shape(encoding.contextual_bias, one_q, one_logit, one_pair) is not None


def visible_keys(length: int, window: int | None = None) -> Bool[Array, "L L"]:
    """(L, L) bool: key j visible from query i (j <= i, and i - j < window), as attention masks."""
    index = jnp.arange(length)
    return _mask(index, index, window)


def _mask(q_index: Array, k_index: Array, window: int | None) -> Array:
    """(Lq, Lk) bool: key j visible from query i (j <= i, and i - j < window)."""
    ok = k_index[None, :] <= q_index[:, None]
    if window is not None:
        ok = ok & (k_index[None, :] > q_index[:, None] - window)
    return ok


def _raw_logits(q: Array, k: Array, scale: float, bias: Array | None) -> Float[Array, "H Bq Bk"]:
    """Unmasked, unscaled-by-row float32 logits of queries (H, Bq, Dh) against keys (H, Bk, Dh)."""
    s = jnp.einsum("hqd,hkd->hqk", q, k, preferred_element_type=jnp.float32) * scale
    return s if bias is None else s + bias


def _block_logits(
    q: Array,
    k: Array,
    scale: float,
    bias: Array | None,
    ok: Array,
    row_scale: Array | None,
    contextual: PositionEncoding | None = None,
) -> Float[Array, "H Bq Bk"]:
    """Masked float32 logits of queries (H, Bq, Dh) against keys (H, Bk, Dh), each query's row
    times `row_scale` (H, Bq) when given. With `contextual` (the reference path, keys the whole
    causal prefix) its `contextual_bias` of these logits is added first."""
    s = _raw_logits(q, k, scale, bias)
    if contextual is not None:
        term = contextual.contextual_bias(q, s, ok)
        s = s if term is None else s + term
    if row_scale is not None:
        s = s * row_scale[..., None]
    return jnp.where(ok[None], s, MASKED)


def attend_keys(
    q: Float[Array, "H Lq Dh"],
    k: Float[Array, "H Lk Dh"],
    v: Float[Array, "H Lk Dh"],
    q_positions: Int[Array, " Lq"],
    k_positions: Int[Array, " Lk"],
    visible: Bool[Array, "Lq Lk"],
    encoding: PositionEncoding,
    *,
    scale: float,
    row_scale: Float[Array, "H Lq"] | None = None,
) -> Float[Array, "H Lq Dh"]:
    """Exact softmax attention of queries against given keys (a decoding cache, keys in sequence
    order) with an explicit visibility mask: the encoding's bias of the position values, its
    contextual term, the row scale, then the mask, as the reference path computes them."""
    bias = encoding.bias(q_positions, k_positions)
    logits = _block_logits(q, k, scale, bias, visible, row_scale, encoding)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
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
    scale: float,
    window: int | None = None,
    row_scale: Float[Array, "H L"] | None = None,
) -> Float[Array, "H L Dh"]:
    """Exact softmax per query block over its causal key prefix (`memory.causal_blocks`), with
    the encoding's bias and contextual term (`contextual_bias` of each block's logits)."""
    index = jnp.arange(q.shape[1])
    outs = []
    for start, stop in causal_blocks(q.shape[1]):
        bias = None if encoding is None else encoding.bias(positions[start:stop], positions[:stop])
        ok = _mask(index[start:stop], index[:stop], window)
        rows = None if row_scale is None else row_scale[:, start:stop]
        logits = _block_logits(q[:, start:stop], k[:, :stop], scale, bias, ok, rows, encoding)
        weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
        outs.append(jnp.einsum("hqk,hkd->hqd", weights, v[:, :stop]))
    return jnp.concatenate(outs, axis=1)


# ---------------------------------------------------------------------------------------------
# blocked (online softmax, custom VJP)


@dataclass(frozen=True)
class _Plan:
    """Static layout of one blocked call: block size, number of blocks, scale, window."""

    block: int
    n_blocks: int
    scale: float
    window: int | None

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
        return _mask(i * self.block + offsets, j * self.block + offsets, self.window)


def blocked_attention(
    q: Float[Array, "H L Dh"],
    k: Float[Array, "H L Dh"],
    v: Float[Array, "H L Dh"],
    positions: Int[Array, " L"],
    encoding: PositionEncoding | None,
    *,
    scale: float,
    window: int | None = None,
    block: int | None = None,
    row_scale: Float[Array, "H L"] | None = None,
) -> Float[Array, "H L Dh"]:
    """Online-softmax attention in (block x block) tiles, linear memory forward and backward.

    L need not be a multiple of `block`: the sequence is padded at the end (padded keys lie
    after every real query, so causality hides them; padded queries are dropped). `block`
    defaults to BLOCK.
    """
    if encoding is not None and _has_contextual(encoding, q):
        raise ConfigError(CONTEXTUAL_NEEDS_REFERENCE.format(implementation="blocked"))
    length = q.shape[1]
    block = min(block or BLOCK, length)
    n_blocks = -(-length // block)
    pad = n_blocks * block - length
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0))) for x in (q, k, v))
        positions = jnp.pad(positions, (0, pad), mode="edge")
        if row_scale is not None:
            row_scale = jnp.pad(row_scale, ((0, 0), (0, pad)), constant_values=1.0)
    plan = _Plan(block, n_blocks, float(scale), window)
    out = _flash((q, k, v, encoding, row_scale), positions, plan)
    return out[:, :length]


def _tiles(x: Array, plan: _Plan) -> Array:
    """(H, L, *rest) -> (n_blocks, H, block, *rest)."""
    tiled = x.reshape(x.shape[0], plan.n_blocks, plan.block, *x.shape[2:])
    return jnp.moveaxis(tiled, 1, 0)


def _untile(x: Array) -> Array:
    """(n_blocks, H, block, *rest) -> (H, L, *rest)."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1, *x.shape[3:])


def _bias(encoding: PositionEncoding | None, q_positions: Array, k_positions: Array):
    return None if encoding is None else encoding.bias(q_positions, k_positions)


def _forward(q, k, v, encoding, row_scale, positions, plan: _Plan) -> tuple[Array, Array]:
    """Outputs (H, L, Dh) and per-row log-sum-exp (H, L) of the padded sequence."""
    qt, kt, vt = (_tiles(x, plan) for x in (q, k, v))
    rt = None if row_scale is None else _tiles(row_scale, plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    heads, _, dh = q.shape[0], q.shape[1], q.shape[2]

    def query_block(_, i):
        qi = qt[i]
        ri = None if rt is None else rt[i]

        def key_block(j, carry):
            m, norm, acc = carry
            bias = _bias(encoding, pt[i], pt[j])
            s = _block_logits(qi, kt[j], plan.scale, bias, plan.mask(i, j), ri)
            m_new = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - m_new[..., None])
            correction = jnp.exp(m - m_new)
            norm = norm * correction + p.sum(-1)
            pv = jnp.einsum(
                "hqk,hkd->hqd", p.astype(vt.dtype), vt[j], preferred_element_type=jnp.float32
            )
            return m_new, norm, acc * correction[..., None] + pv

        init = (
            jnp.full((heads, plan.block), MASKED, jnp.float32),
            jnp.zeros((heads, plan.block), jnp.float32),
            jnp.zeros((heads, plan.block, dh), jnp.float32),
        )
        m, norm, acc = jax.lax.fori_loop(*plan.key_blocks(i), key_block, init)
        return None, ((acc / norm[..., None]).astype(v.dtype), m + jnp.log(norm))

    _, (out, lse) = jax.lax.scan(query_block, None, jnp.arange(plan.n_blocks))
    return _untile(out), _untile(lse)


def _backward(q, k, v, encoding, row_scale, positions, plan: _Plan, out, lse, d_out):
    """Gradients of (q, k, v, encoding, row_scale) from recomputed block logits (the flash
    backward). With a row scale r the logits are r * z: dz = r * dS and dr = rowsum(dS * z)."""
    qt, kt, vt, dot = (_tiles(x, plan) for x in (q, k, v, d_out))
    rt = None if row_scale is None else _tiles(row_scale, plan)
    lset = _tiles(lse, plan)
    delta = _tiles(jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1), plan)
    pt = positions.reshape(plan.n_blocks, plan.block)
    if encoding is not None:
        params, static = eqx.partition(encoding, eqx.is_inexact_array)
        d_params0 = jax.tree.map(jnp.zeros_like, params)
    else:
        params = static = d_params0 = None

    def query_block(carry, i):
        dk, dv, d_params = carry
        qi, doi = qt[i], dot[i]
        ri = None if rt is None else rt[i]

        def key_block(j, inner):
            dq, dk, dv, d_params, dr = inner
            ok = plan.mask(i, j)
            if encoding is None:
                bias, bias_vjp = None, None
            else:
                bias, bias_vjp = jax.vjp(
                    lambda p: eqx.combine(p, static).bias(pt[i], pt[j]), params
                )
            z = _raw_logits(qi, kt[j], plan.scale, bias)
            s = jnp.where(ok[None], z if ri is None else z * ri[..., None], MASKED)
            p = jnp.exp(s - lset[i][..., None])  # 0 where masked
            dv_j = jnp.einsum(
                "hqk,hqd->hkd", p.astype(doi.dtype), doi, preferred_element_type=jnp.float32
            )
            dp = jnp.einsum("hqd,hkd->hqk", doi, vt[j], preferred_element_type=jnp.float32)
            ds = p * (dp - delta[i][..., None])
            if ri is not None:
                dr = dr + jnp.sum(jnp.where(ok[None], ds * z, 0.0), -1)
                ds = ds * ri[..., None]
            if bias_vjp is not None:
                (d_bias,) = bias_vjp(ds)
                d_params = jax.tree.map(jnp.add, d_params, d_bias)
            ds = ds * plan.scale
            dq = dq + jnp.einsum(
                "hqk,hkd->hqd", ds.astype(kt.dtype), kt[j], preferred_element_type=jnp.float32
            )
            dk_j = jnp.einsum(
                "hqk,hqd->hkd", ds.astype(qi.dtype), qi, preferred_element_type=jnp.float32
            )
            return dq, dk.at[j].add(dk_j), dv.at[j].add(dv_j), d_params, dr

        dq0 = jnp.zeros(qi.shape, jnp.float32)
        dr0 = jnp.zeros(qi.shape[:-1], jnp.float32)
        dq, dk, dv, d_params, dr = jax.lax.fori_loop(
            *plan.key_blocks(i), key_block, (dq0, dk, dv, d_params, dr0)
        )
        return (dk, dv, d_params), (dq, dr)

    zeros = jnp.zeros(kt.shape, jnp.float32)
    (dk, dv, d_params), (dq, dr) = jax.lax.scan(
        query_block, (zeros, zeros, d_params0), jnp.arange(plan.n_blocks)
    )
    grads = (_untile(dq).astype(q.dtype), _untile(dk).astype(k.dtype), _untile(dv).astype(v.dtype))
    return (*grads, d_params, None if row_scale is None else _untile(dr))


@eqx.filter_custom_vjp
def _flash(operands, positions, plan):
    return _forward(*operands, positions, plan)[0]


@_flash.def_fwd
def _flash_fwd(perturbed, operands, positions, plan):
    out, lse = _forward(*operands, positions, plan)
    return out, (out, lse)


@_flash.def_bwd
def _flash_bwd(residuals, d_out, perturbed, operands, positions, plan):
    out, lse = residuals
    return _backward(*operands, positions, plan, out, lse, d_out)


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
    "fused_attention",
    "reference_attention",
    "visible_keys",
]

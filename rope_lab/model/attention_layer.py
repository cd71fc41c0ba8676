"""One causal self-attention layer: projections (grouped-query, optional q/k/v biases and
QK-norm), the position encoding's rotation, each query's logit multiplier (`row_scale`) and
what attention computes (`model.attention_fn`, `attention_logits.Variant`), computed by
`rope_lab.model.attention.attend` with the model's implementation (`model.attention`)."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from rope_lab.config import LayerConfig, ModelConfig
from rope_lab.model.attention import attend, expand_kv, visible_keys
from rope_lab.model.attention_logits import Variant, raw_logits, with_decay
from rope_lab.model.layers import Linear, Norm, fused_linear, make_linear, model_norm
from rope_lab.model.positions.modules import PositionEncoding

DEFAULT_LAYER = LayerConfig()  # full causal attention, the model-wide encoding


def attention_scale(cfg: ModelConfig) -> float:
    """The multiplier of q.k: 1/sqrt(d_head); under muP sqrt(d_base)/d_head, with d_base the
    head dimension at `model.base_width`: 1/d in the head dimension, equal to SP's at the base
    width (and at every width when widths grow heads at a fixed head_dim);
    1/sqrt(model.attention_scale_dim) where that is set."""
    if cfg.attention_scale_dim is not None:
        return 1.0 / math.sqrt(cfg.attention_scale_dim)
    d = cfg.d_head
    if cfg.parametrization != "mup":
        return 1.0 / math.sqrt(d)
    grows = cfg.heads is not None and cfg.head_dim is None  # fixed heads, d_head = width / heads
    d_base = cfg.base_width / cfg.heads if grows else d  # type: ignore[operator]
    return (d_base / d) / math.sqrt(d_base)  # = sqrt(d_base) / d, SP's float at d = d_base


class Attention(eqx.Module):
    """Causal multi-head self-attention with rotation and bias hooks, and optional attention
    temperature (`row_scale`): Scalable-Softmax's learned s_h log(n), a layer kind's Llama 4
    query scaling, and a model-wide zero-shot temperature.

    Grouped-query attention (`model.kv_heads`): keys and values have `kv_heads` heads, query
    head h reads key/value head h // (heads / kv_heads); `attend` expands them. Optional
    q/k/v biases (`model.qkv_bias`) and RMSNorm of each head's queries and keys before the
    rotation (`model.qk_norm`; with `model.qk_norm_scope: projection`, of all heads' at once)."""

    q: Linear
    k: Linear
    v: Linear
    o: Linear
    ssmax: Float[Array, " H"] | None  # Scalable-Softmax's s per head (model.scalable_softmax)
    variant: Variant  # what attention computes (model.attention_fn) and its learned arrays
    gate: Linear | None  # the variant's output gate (gated attention), x -> (H Dh) or (H)
    forget: Linear | None  # the variant's forget gate (FoX), x -> (H) logits of log f
    q_norm: Norm | None
    k_norm: Norm | None
    heads: int = eqx.field(static=True)
    kv_heads: int = eqx.field(static=True)
    scale: float = eqx.field(static=True)
    implementation: str = eqx.field(static=True)
    qk_norm_whole: bool = eqx.field(static=True, default=False)

    def __init__(self, cfg: ModelConfig, *, train_length: int, key: PRNGKeyArray):
        kq, kk, kv, ko = jax.random.split(key, 4)
        inner, kv_width = cfg.attention_width, cfg.n_kv_heads * cfg.d_head
        self.q = make_linear(cfg, cfg.width, inner, kq, bias=cfg.qkv_bias)
        self.k = make_linear(cfg, cfg.width, kv_width, kk, bias=cfg.qkv_bias)
        self.v = make_linear(cfg, cfg.width, kv_width, kv, bias=cfg.qkv_bias)
        self.o = make_linear(cfg, inner, cfg.width, ko)
        s0 = 1.0 / math.log(max(train_length, 2))
        self.ssmax = jnp.full((cfg.n_heads,), s0, jnp.float32) if cfg.scalable_softmax else None
        fn = cfg.attention_options  # its own key, so adding a variant moves no other weight
        self.variant = Variant(fn, fn.init_params(cfg, key=jax.random.fold_in(key, 1)))
        features = fn.gate_features(cfg)
        gate_key = jax.random.fold_in(key, 2)
        self.gate = make_linear(cfg, cfg.width, features, gate_key) if features else None
        forget_key = jax.random.fold_in(key, 3)
        self.forget = (
            make_linear(cfg, cfg.width, cfg.n_heads, forget_key, bias=True)
            if fn.forget_gate
            else None
        )
        whole = cfg.qk_norm_scope == "projection"
        q_width, k_width = (cfg.attention_width, cfg.n_kv_heads * cfg.d_head) if whole else (
            cfg.d_head, cfg.d_head)  # fmt: skip
        self.q_norm = model_norm(cfg, q_width) if cfg.qk_norm else None
        self.k_norm = model_norm(cfg, k_width) if cfg.qk_norm else None
        self.qk_norm_whole = whole
        self.heads = cfg.n_heads
        self.kv_heads = cfg.n_kv_heads
        self.scale = attention_scale(cfg)
        self.implementation = cfg.attention

    def row_scale(
        self,
        positions: Int[Array, "*B L"],
        layer: LayerConfig,
        temperature: float,
        index: Int[Array, " L"] | None = None,
    ) -> Float[Array, "*B H L"] | None:
        """Each query's logit multiplier (broadcastable to (*B, H, L)), or None for 1. `index`:
        the queries' sequence indices (default 0..L-1; decoding passes the cached length)."""
        shape = (*positions.shape[:-1], self.heads, positions.shape[-1])
        factors = []
        if temperature != 1.0:
            factors.append(jnp.full(shape, temperature, jnp.float32))
        if layer.attn_scale:
            p = positions.astype(jnp.float32)
            llama4 = 1.0 + layer.attn_scale * jnp.log1p(jnp.floor((p + 1.0) / layer.floor_scale))
            factors.append(jnp.broadcast_to(jnp.expand_dims(llama4, -2), shape))
        if self.ssmax is not None:
            index = jnp.arange(positions.shape[-1]) if index is None else index
            n = (index + 1).astype(jnp.float32)  # keys a query sees
            if layer.window is not None:
                n = jnp.minimum(n, layer.window)
            factors.append(jnp.broadcast_to(self.ssmax[:, None] * jnp.log(n)[None, :], shape))
        out = None
        for factor in factors:
            out = factor if out is None else out * factor
        return out

    def _split(self, t: Array, heads: int) -> Float[Array, "L heads Dh"]:
        length, width = t.shape
        return t.reshape(length, heads, width // heads)

    def _rotated(
        self, q: Array, k: Array, positions: Array, encoding: PositionEncoding
    ) -> tuple[Float[Array, "H L Dh"], Float[Array, "KV L Dh"]]:
        """Heads-major rotated q and k; (S, H, L, Dh) and (S, KV, L, Dh) under a remap."""
        normed = self.q_norm is not None and self.k_norm is not None
        if normed and self.qk_norm_whole:  # over all heads at once, before the split
            q, k = self.q_norm(q), self.k_norm(k)  # type: ignore[misc]
        q, k = self._split(q, self.heads), self._split(k, self.kv_heads)
        if normed and not self.qk_norm_whole:
            q, k = self.q_norm(q), self.k_norm(k)  # type: ignore[misc]
        q, k = encoding.rotate(q, k, positions)
        # Heads-major (H, L, Dh) operands: both attention matmuls are plain batched matmuls.
        return jnp.swapaxes(q, -3, -2), jnp.swapaxes(k, -3, -2)

    def logits(
        self,
        x: Float[Array, "L D"],
        positions: Array,
        encoding: PositionEncoding,
        layer: LayerConfig = DEFAULT_LAYER,
        temperature: float = 1.0,
    ) -> Float[Array, "H L L"]:
        """Unmasked attention logits in float32: rotation, bias and row scale included."""
        q, k = fused_linear(x, self.q, self.k)
        q, k = self._rotated(q, k, positions, encoding)
        k = expand_kv(k, self.heads)
        bias = encoding.bias(positions, positions)
        decay = self.log_decay(x)
        bias = bias if decay is None else with_decay(bias, decay, decay)
        choice = encoding.remap_choice(positions, positions)
        logits = raw_logits(q, k, self.scale, bias, choice)
        term = encoding.contextual_bias(q, logits, visible_keys(positions.shape[-1], layer.window))
        logits = logits if term is None else logits + term
        rows = self.row_scale(positions, layer, temperature)
        return (
            logits if rows is None else logits * jnp.broadcast_to(rows, logits.shape[:2])[..., None]
        )

    def project(
        self, x: Float[Array, "*B L D"], positions: Int[Array, "*B L"], encoding: PositionEncoding
    ) -> tuple[Float[Array, "*B H L Dh"], Float[Array, "*B KV L Dh"], Float[Array, "*B KV L Dh"]]:
        """Queries (*B, H, L, Dh) and keys rotated by the encoding, and values, heads-major;
        keys and values have the `kv_heads` heads (*B, KV, L, Dh)."""
        q, k, v = fused_linear(x, self.q, self.k, self.v)
        rotate = lambda q, k, p: self._rotated(q, k, p, encoding)
        for _ in range(x.ndim - 2):
            rotate = jax.vmap(rotate)
        q, k = rotate(q, k, positions)
        return q, k, jnp.swapaxes(v.reshape(*v.shape[:-1], self.kv_heads, -1), -3, -2)

    def log_decay(self, x: Float[Array, "*B L D"]) -> Float[Array, "*B H L"] | None:
        """The forget gate's cumulative log gates c_i = sum_{l<=i} log sigmoid(x_l w + b) per
        head, in float32 (the logit of pair (i, j) gains c_i - c_j), or None without one."""
        if self.forget is None:
            return None
        log_f = jax.nn.log_sigmoid(self.forget(x).astype(jnp.float32))  # (*B, L, H)
        return jnp.swapaxes(jnp.cumsum(log_f, axis=-2), -1, -2)

    def output(
        self, x: Float[Array, "*B L D"], heads: Float[Array, "*B H L Dh"]
    ) -> Float[Array, "*B L D"]:
        """The layer's output from the heads' attention outputs: each head's output times the
        variant's sigmoid gate of the attention input `x` (when it has one), then the output
        projection."""
        out = jnp.swapaxes(heads, -3, -2)  # (*B, L, H, Dh)
        if self.gate is not None:
            gate = self.gate(x)
            gate = gate.reshape(*gate.shape[:-1], self.heads, -1)  # (*B, L, H, Dh or 1)
            out = out * jax.nn.sigmoid(gate.astype(jnp.float32)).astype(out.dtype)
        return self.o(out.reshape(*out.shape[:-2], -1))

    def __call__(
        self,
        x: Float[Array, "*B L D"],
        positions: Int[Array, "*B L"],
        encoding: PositionEncoding,
        layer: LayerConfig = DEFAULT_LAYER,
        temperature: float = 1.0,
    ) -> Float[Array, "*B L D"]:
        """Attend causally over the sequence index (not over position values), within the
        layer kind's window.

        The projections run on all sequences at once; rotation runs per sequence (vmapped),
        attention by `rope_lab.model.attention.attend` with the model's `attention` implementation.
        """
        q, k, v = self.project(x, positions, encoding)
        out = attend(
            q,
            k,
            v,
            positions,
            encoding,
            variant=self.variant,
            scale=self.scale,
            implementation=self.implementation,
            window=layer.window,
            row_scale=self.row_scale(positions, layer, temperature),
            log_decay=self.log_decay(x),
        )
        return self.output(x, out)

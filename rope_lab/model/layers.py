"""The dense parts of a Transformer block: `Linear` (with a parametrisation's init scale and
forward multiplier), `dense` and `fused_linear` (one matmul over a batch's (B L, D) rows, and
over weights concatenated at call time), `Norm` (LayerNorm with or without bias / RMSNorm,
optionally zero-centred: scaled by 1 + weight) and `MLP` (GELU / SwiGLU / GeGLU). See
`rope_lab.model.transformer` for why the matmuls are shaped this way."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from rope_lab.config import ModelConfig


class Linear(eqx.Module):
    """y = multiplier * x @ W.T (+ b); W has shape (out, in), the optional bias b (out,)
    (zero-initialised, added after the multiplier)."""

    weight: Float[Array, "out in"]
    bias: Float[Array, " out"] | None
    multiplier: float = eqx.field(static=True)

    def __init__(
        self,
        fan_in: int,
        fan_out: int,
        *,
        init_std: float,
        multiplier: float,
        key,
        bias: bool = False,
    ):
        self.weight = init_std * jax.random.normal(key, (fan_out, fan_in))
        self.bias = jnp.zeros((fan_out,)) if bias else None
        self.multiplier = multiplier

    def __call__(self, x: Float[Array, "... in"]) -> Float[Array, "... out"]:
        """Apply to the last axis."""
        y = dense(x, self.weight.astype(x.dtype))
        y = y * self.multiplier if self.multiplier != 1.0 else y
        return y if self.bias is None else _add_bias(y, self.bias)


def dense(x: Float[Array, "... in"], weight: Float[Array, "out in"]) -> Float[Array, "... out"]:
    """x @ weight.T as one 2-D matmul over the leading axes of x collapsed into one.

    With one collapsed token axis the weight gradient contracts a single axis; with separate
    (batch, length) axes XLA:CPU first copies the output cotangent into a transposed layout.
    """
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    return y.reshape(*x.shape[:-1], weight.shape[0])


def fused_linear(x: Float[Array, "... in"], *layers: Linear) -> list[Float[Array, "... out_i"]]:
    """The outputs of several Linears of the same input (..., in), from one matmul.

    Weights (out_i, in) are concatenated to (sum out_i, in) at call time, so the parameters stay
    separate leaves; each output (..., out_i) gets its own layer's multiplier.
    """
    weight = jnp.concatenate([layer.weight for layer in layers]).astype(x.dtype)
    y = dense(x, weight)
    # lax.split, not slicing: its transpose is one concatenate, where slices transpose to a
    # zero-padded copy of the whole output per part, summed.
    parts = jax.lax.split(y, [layer.weight.shape[0] for layer in layers], axis=y.ndim - 1)
    out = []
    for part, layer in zip(parts, layers, strict=True):
        part = part * layer.multiplier if layer.multiplier != 1.0 else part
        out.append(part if layer.bias is None else _add_bias(part, layer.bias))
    return out


def _add_bias(y: Float[Array, "... out"], bias: Float[Array, " out"]) -> Float[Array, "... out"]:
    return y + bias.astype(y.dtype).reshape((1,) * (y.ndim - 1) + bias.shape)


def make_linear(
    cfg: ModelConfig,
    fan_in: int,
    fan_out: int,
    key,
    *,
    readout: bool = False,
    bias: bool = False,
) -> Linear:
    """A Linear (fan_in -> fan_out) initialised by the model's parametrisation (the table in
    `rope_lab.model.transformer`), with a zero bias when `bias`."""
    if cfg.parametrization == "ntk":
        return Linear(fan_in, fan_out, init_std=1.0, multiplier=fan_in**-0.5, key=key, bias=bias)
    if cfg.parametrization == "mup" and readout:
        # init var base_width / fan_in^2: SP's at fan_in = base_width, muP's 1/fan_in^2 law
        std = (cfg.base_width / fan_in) * cfg.base_width**-0.5  # SP's float at the base width
        return Linear(fan_in, fan_out, init_std=std, multiplier=1.0, key=key, bias=bias)
    return Linear(fan_in, fan_out, init_std=fan_in**-0.5, multiplier=1.0, key=key, bias=bias)


class Norm(eqx.Module):
    """LayerNorm (`layernorm`: mean-centred, with bias; `layernorm_no_bias`: Cohere's, weight
    only) or RMSNorm over the last axis; `zero_centred` (Gemma's RMSNorm):
    the normalised x times (1 + weight), the weight initialised to 0 (the same function as
    weight 1 without it)."""

    weight: Float[Array, " D"]
    bias: Float[Array, " D"] | None
    eps: float = eqx.field(static=True, default=1e-5)
    zero_centred: bool = eqx.field(static=True, default=False)
    mean_centred: bool = eqx.field(static=True, default=True)

    def __init__(self, width: int, kind: str, eps: float = 1e-5, zero_centred: bool = False):
        self.weight = jnp.zeros((width,)) if zero_centred else jnp.ones((width,))
        self.bias = jnp.zeros((width,)) if kind == "layernorm" else None
        self.eps = eps
        self.zero_centred = zero_centred
        self.mean_centred = kind != "rmsnorm"

    def __call__(self, x: Float[Array, "L D"]) -> Float[Array, "L D"]:
        """Normalise in float32, return in x's dtype."""
        h = x.astype(jnp.float32)
        if self.mean_centred:
            h = h - h.mean(-1, keepdims=True)
        h = h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + self.eps)
        lead = (1,) * (h.ndim - 1)
        scale = self.weight.astype(jnp.float32)
        h = h * (1.0 + scale if self.zero_centred else scale).reshape(*lead, -1)
        if self.bias is not None:
            h = h + self.bias.reshape(*lead, -1)
        return h.astype(x.dtype)


def model_norm(cfg: ModelConfig, width: int) -> Norm:
    """A norm of the model's kind, epsilon and centring over `width` features."""
    return Norm(width, cfg.norm, cfg.norm_eps, zero_centred=cfg.norm_zero_centred)


class MLP(eqx.Module):
    """GELU MLP, SwiGLU or GeGLU (GELU's tanh approximation on the gate)."""

    up: Linear
    down: Linear
    gate: Linear | None
    gelu_gate: bool = eqx.field(static=True, default=False)

    def __init__(self, cfg: ModelConfig, *, key: PRNGKeyArray):
        ku, kd, kg = jax.random.split(key, 3)
        self.up = make_linear(cfg, cfg.width, cfg.d_mlp, ku)
        self.down = make_linear(cfg, cfg.d_mlp, cfg.width, kd)
        self.gate = make_linear(cfg, cfg.width, cfg.d_mlp, kg) if cfg.gated_mlp else None
        self.gelu_gate = cfg.mlp == "geglu"

    def __call__(self, x: Float[Array, "*B L D"]) -> Float[Array, "*B L D"]:
        """Position-wise feed-forward."""
        if self.gate is None:
            return self.down(jax.nn.gelu(self.up(x)))
        gate, up = fused_linear(x, self.gate, self.up)
        act = jax.nn.gelu(gate, approximate=True) if self.gelu_gate else jax.nn.silu(gate)
        return self.down(act * up)

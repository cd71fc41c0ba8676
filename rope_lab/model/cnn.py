"""The causal 1-D convolutional language model of `model.family: cnn`.

`net(tokens (*B, L), positions) -> logits (*B, L, V)`, the Transformer's call: token embedding,
`depth` pre-norm residual blocks x + conv(norm(x)), then x + mlp(norm(x)), a final norm and an
untied readout. Positions are accepted and ignored: no position encoding, no attention. The
convolution of layer l is causal with kernel size k and dilation d_l:

    y_t = sum_{j=0}^{k-1} W_j x_{t - (k - 1 - j) d_l},   x_s = 0 for s < 0,

computed as one `Linear` (k D -> D) over the k taps concatenated along the features (the taps
are slices of the sequence zero-padded on the left by (k - 1) d_l), so the parametrisations,
weight decay and muP multipliers treat it as the Transformer's matmuls. Output t sees tokens
t - R + 1 .. t, R = 1 + sum_l (k - 1) d_l (`CNNConfig.receptive_field`); where that window lies
inside the sequence a common shift of the input shifts the output exactly.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from rope_lab.config import ModelConfig
from rope_lab.model.layers import MLP, Linear, Norm, make_linear
from rope_lab.model.transformer import DTYPES


class CausalConv(eqx.Module):
    """Causal dilated convolution over the sequence axis; `linear.weight` (D, k D) holds tap j's
    (D, D) matrix W_j in columns j D .. (j + 1) D."""

    linear: Linear
    kernel_size: int = eqx.field(static=True)
    dilation: int = eqx.field(static=True)

    def __call__(self, x: Float[Array, "*B L D"]) -> Float[Array, "*B L D"]:
        """y_t = sum_j W_j x_{t - (k - 1 - j) d}, zeros before the first token."""
        length, pad = x.shape[-2], (self.kernel_size - 1) * self.dilation
        padded = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(pad, 0), (0, 0)])
        taps = [
            jax.lax.slice_in_dim(padded, j * self.dilation, j * self.dilation + length, axis=-2)
            for j in range(self.kernel_size)
        ]
        return self.linear(jnp.concatenate(taps, axis=-1))


class ConvBlock(eqx.Module):
    """Pre-norm residual block: x + conv(norm(x)), then x + mlp(norm(x))."""

    conv_norm: Norm
    conv: CausalConv
    mlp_norm: Norm
    mlp: MLP

    def __call__(self, x: Float[Array, "*B L D"]) -> Float[Array, "*B L D"]:
        """(*B, L, D) -> (*B, L, D)."""
        x = x + self.conv(self.conv_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class CNN(eqx.Module):
    """Embedding, `depth` convolution blocks (run in turn: each has its own static dilation),
    final norm, untied readout. `config`, `train_length` and `temperature` are those a
    Transformer carries (a CNN has no attention, so `temperature` stays 1)."""

    embedding: Float[Array, "V D"]
    blocks: tuple[ConvBlock, ...]
    final_norm: Norm
    head: Linear
    config: ModelConfig = eqx.field(static=True)
    train_length: int = eqx.field(static=True)
    temperature: float = eqx.field(static=True, default=1.0)

    def __call__(
        self, tokens: Int[Array, "*B L"], positions: Int[Array, "*B L"] | None = None
    ) -> Float[Array, "*B L V"]:
        """Logits (*B, L, V) in float32 for tokens (*B, L); `positions` is ignored."""
        del positions
        x = self.embedding[tokens].astype(DTYPES[self.config.dtype])
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x)).astype(jnp.float32)

    @property
    def vocab_size(self) -> int:
        """Output vocabulary size."""
        return self.embedding.shape[0]

    @property
    def receptive_field(self) -> int:
        """Tokens an output sees, its own included: 1 + sum_l (k - 1) d_l."""
        return 1 + sum((b.conv.kernel_size - 1) * b.conv.dilation for b in self.blocks)


def init_cnn(cfg: ModelConfig, vocab_size: int, *, train_length: int, key: PRNGKeyArray) -> CNN:
    """A freshly initialised CNN of `cfg` (its `model.cnn` fields: kernel size, dilations);
    embeddings N(0, 1), matmul weights by `cfg.parametrization` (`layers.make_linear`; the
    convolution's fan-in is k D)."""
    family = cfg.arch
    ke, kb, kh = jax.random.split(key, 3)
    k, width = family.kernel_size, cfg.width

    def block(dilation: int, key: PRNGKeyArray) -> ConvBlock:
        kc, km = jax.random.split(key)
        conv = CausalConv(make_linear(cfg, k * width, width, kc), k, dilation)
        return ConvBlock(Norm(width, cfg.norm), conv, Norm(width, cfg.norm), MLP(cfg, key=km))

    keys = jax.random.split(kb, cfg.depth)
    dilations = family.layer_dilations(cfg.depth)
    return CNN(
        embedding=jax.random.normal(ke, (vocab_size, width)),
        blocks=tuple(block(d, key) for d, key in zip(dilations, keys, strict=True)),
        final_norm=Norm(width, cfg.norm),
        head=make_linear(cfg, width, vocab_size, kh, readout=True),
        config=cfg,
        train_length=train_length,
    )


__all__ = ["CNN", "CausalConv", "ConvBlock", "init_cnn"]

"""Decoder-only causal Transformer in Equinox, with position-encoding hooks.

`model(tokens (L,), positions (L,) | None) -> logits (L, V)`; a batch (B, L) gives (B, L, V),
equal to `jax.vmap` over the sequences. Blocks are stacked along a leading axis; up to
`MAX_UNROLL` blocks run as a Python loop (what a fully unrolled scan compiles to, faster on
CPU), deeper stacks with `jax.lax.scan` over groups of `MAX_UNROLL` blocks, so compile time does
not grow with depth.

Speed (see `benchmarks/train_step.py`): a batch runs every dense layer as one (B L, D) matmul
(`dense`) and vmaps only attention; vmapped over whole sequences, XLA:CPU contracts each weight
gradient over two axes (batch, length) through a transposed copy of the output cotangent (the
batched train step is faster: benchmarks/RESULTS.md). q, k, v and the SwiGLU gate and up
projections each run as one matmul against their weights concatenated at call time (the
parameter tree is unchanged); `lax.split` (not slicing) separates the outputs, so the backward
pass concatenates the parts instead of summing zero-padded copies. Attention runs on
heads-major (H, L, Dh) operands through `rope_lab.model.attention` (`model.attention`: the reference
query blocks over their causal key prefix at short lengths on CPU, the blocked online-softmax
kernel with linear memory beyond, cuDNN on GPU where it applies).

Rematerialisation (`with_remat`, `train.remat` in the train step only): `block` wraps each
block in `jax.checkpoint` (the backward keeps the block inputs and recomputes the rest), `dots`
keeps only the outputs of matmuls without batch dimensions (the dense layers; attention and
elementwise work are recomputed), `attention` keeps the block inputs and the blocked softmax
kernel's own residuals (its output and per-row log-sum-exp, `flash.KERNEL_RESIDUALS`), so the
backward recomputes the projections and the MLP but never the O(L^2) attention forward (what
flash-attention kernels keep); `none` (the default, and every evaluation) keeps everything.
Under a policy the stack always runs as a scan, one repeat of the pattern per step (unrolled
blocks, XLA:CPU recomputes each block where its forward ran, which saves nothing).

Parametrisations (`sp`, `ntk`, `mup`) differ in init scale, forward multipliers, the attention
logit scale and per-group learning-rate multipliers (`rope_lab.trial.optimizer.lr_multipliers`);
the per-layer table is in docs/design.md (Conventions). In short, with n the width and b
`model.base_width`:

| weight       | sp init var  | ntk: init var 1, forward x | mup (Tensor Programs V, Adam)       |
| embeddings   | 1            | 1                          | 1, lr x 1                           |
| hidden W     | 1/fan_in     | 1/sqrt(fan_in)             | 1/fan_in, lr x b/n                  |
| readout      | 1/fan_in     | 1/sqrt(fan_in)             | b/fan_in^2, lr x b/n                |
| attention    | 1/sqrt(d)    | 1/sqrt(d)                  | sqrt(d_b)/d (d_b: d at width b)     |

At n = b muP is SP exactly (tests/model/test_parametrizations.py).
"""

from __future__ import annotations

import copy

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from rope_lab.config import LayerConfig, ModelConfig
from rope_lab.model.attention_layer import DEFAULT_LAYER, Attention
from rope_lab.model.flash import KERNEL_RESIDUALS
from rope_lab.model.layers import MLP, Linear, Norm, dense, make_linear, model_norm
from rope_lab.model.positions import make_position_encoding
from rope_lab.model.positions.modules import Frozen, PositionEncoding
from rope_lab.registry import SCALINGS
from rope_lab.typed import thaw

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# Blocks unrolled per scan iteration: all of them up to this depth, then a loop over groups of this
# many (compile time stays flat with depth; unrolled is faster per step: benchmarks/RESULTS.md).
MAX_UNROLL = 8
# `train.remat` -> what `jax.checkpoint` lets the backward keep inside a block
REMAT_POLICIES = {
    "block": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "attention": jax.checkpoint_policies.save_only_these_names(*KERNEL_RESIDUALS),
}


class Block(eqx.Module):
    """Residual block: pre-norm x + attn(norm(x)), then x + mlp(norm(x)); with
    `model.norm_placement: post`, x + norm(attn(x)), then x + norm(mlp(x)); `sandwich`,
    x + norm'(attn(norm(x))), then x + norm'(mlp(norm(x))) (`attn_post_norm`, `mlp_post_norm`
    the output norms, None otherwise); `model.block: parallel`, x + attn(norm(x)) + mlp(norm(x))
    with the one norm `attn_norm` (`mlp_norm` None)."""

    attn_norm: Norm
    attn: Attention
    mlp_norm: Norm | None
    mlp: MLP
    attn_post_norm: Norm | None = None
    mlp_post_norm: Norm | None = None
    post_norm: bool = eqx.field(static=True, default=False)
    parallel: bool = eqx.field(static=True, default=False)

    def __init__(self, cfg: ModelConfig, *, train_length: int, key: PRNGKeyArray):
        ka, km = jax.random.split(key)
        self.attn_norm = model_norm(cfg, cfg.width)
        self.attn = Attention(cfg, train_length=train_length, key=ka)
        self.parallel = cfg.block == "parallel"
        self.mlp_norm = None if self.parallel else model_norm(cfg, cfg.width)
        self.mlp = MLP(cfg, key=km)
        sandwich = cfg.norm_placement == "sandwich"
        self.attn_post_norm = model_norm(cfg, cfg.width) if sandwich else None
        self.mlp_post_norm = model_norm(cfg, cfg.width) if sandwich else None
        self.post_norm = cfg.norm_placement == "post"

    def attention_input(self, x: Array) -> Array:
        """What attention reads of the residual stream x (*B, L, D)."""
        return x if self.post_norm else self.attn_norm(x)

    def add_attention(self, x: Array, out: Array) -> Array:
        """The residual stream x (*B, L, D) plus attention's output `out` (*B, L, D)."""
        if self.attn_post_norm is not None:
            return x + self.attn_post_norm(out)
        return x + (self.attn_norm(out) if self.post_norm else out)

    def add_mlp(self, x: Array) -> Array:
        """The residual stream x (*B, L, D) plus the MLP's (normalised) contribution (of a
        sequential block)."""
        assert self.mlp_norm is not None, "a parallel block's MLP reads the block's input"
        if self.post_norm:
            return x + self.mlp_norm(self.mlp(x))
        out = self.mlp(self.mlp_norm(x))
        return x + (out if self.mlp_post_norm is None else self.mlp_post_norm(out))

    def finish(self, x: Array, out: Array) -> Array:
        """The block's output (*B, L, D) from its input x and attention's output `out`: the
        MLP after attention's residual, or beside it in a parallel block (reading norm(x))."""
        if self.parallel:
            return x + out + self.mlp(self.attn_norm(x))
        return self.add_mlp(self.add_attention(x, out))

    def __call__(
        self,
        x: Array,
        positions: Array,
        encoding: PositionEncoding,
        layer: LayerConfig = DEFAULT_LAYER,
        temperature: float = 1.0,
    ) -> Array:
        """(*B, L, D) -> (*B, L, D) with positions (*B, L), as a layer of kind `layer`."""
        out = self.attn(self.attention_input(x), positions, encoding, layer, temperature)
        return self.finish(x, out)


class Transformer(eqx.Module):
    """Embedding, position encoding, `depth` stacked blocks, final norm, readout (a Linear, or
    with `model.tie_embeddings` the embedding transposed: `head` is then None).

    Block l is of layer kind `config.pattern[l % P]` (P kinds): its window and query scaling,
    and its encoding `layer_positions[l % P]` (None: the model-wide `position`, whose `embed`
    hook alone adds to the input). `temperature` multiplies every attention logit (1 in
    training; the zero-shot log-length temperature at evaluation, `with_temperature`).
    """

    embedding: Float[Array, "V D"]
    position: PositionEncoding
    layer_positions: tuple[PositionEncoding | None, ...]
    blocks: Block  # every array leaf has a leading (depth,) axis
    final_norm: Norm
    head: Linear | None
    config: ModelConfig = eqx.field(static=True)
    train_length: int = eqx.field(static=True)
    temperature: float = eqx.field(static=True, default=1.0)
    remat: str = eqx.field(static=True, default="none")

    def __init__(
        self,
        cfg: ModelConfig,
        vocab_size: int,
        *,
        train_length: int,
        max_length: int,
        key: PRNGKeyArray,
    ):
        ke, kp, kb, kh = jax.random.split(key, 4)
        self.embedding = jax.random.normal(ke, (vocab_size, cfg.width))
        self.position = make_position_encoding(
            cfg, max_length=max_length, train_length=train_length, key=kp
        )
        self.layer_positions = tuple(
            None
            if layer.position is None
            else make_position_encoding(
                cfg.with_position(layer.position),
                max_length=max_length,
                train_length=train_length,
                key=jax.random.fold_in(kp, i + 1),
            )
            for i, layer in enumerate(cfg.layers)
        )
        self.blocks = eqx.filter_vmap(lambda k: Block(cfg, train_length=train_length, key=k))(
            jax.random.split(kb, cfg.depth)
        )
        self.final_norm = model_norm(cfg, cfg.width)
        self.head = (
            None
            if cfg.tie_embeddings
            else make_linear(cfg, cfg.width, vocab_size, kh, readout=True)
        )
        self.config = cfg
        self.train_length = train_length

    def __call__(
        self, tokens: Int[Array, "*B L"], positions: Int[Array, "*B L"] | None = None
    ) -> Float[Array, "*B L V"]:
        """Logits (*B, L, V) for tokens (*B, L) at positions (*B, L) or (L,) (default 0..L-1),
        in float32. A batch (B, L) runs its dense layers as (B L, D) matmuls, which trains
        faster than `jax.vmap` over sequences; the result is the same."""
        positions = _default_positions(tokens, positions)
        x = self.embed(tokens, positions)
        pattern = self.config.pattern
        params, static = eqx.partition(self.blocks, eqx.is_array)
        # (depth, ...) -> (repeats, P, ...): one scan step runs the pattern's P kinds in turn
        params = jax.tree.map(lambda a: a.reshape(-1, len(pattern), *a.shape[1:]), params)

        def repeat(h, pattern_params):
            for i in range(len(pattern)):
                block = eqx.combine(jax.tree.map(lambda a, i=i: a[i], pattern_params), static)
                h = self.run_block(block, h, positions, i)
            return h, None

        repeats = self.config.depth // len(pattern)
        if self.remat != "none":
            # One scan step per repeat: unrolled, XLA:CPU schedules the recomputation where
            # the forward ran and keeps as much as without rematerialisation.
            x, _ = jax.lax.scan(repeat, x, params)
        elif repeats * len(pattern) <= MAX_UNROLL:
            # A Python loop, the program a fully unrolled scan compiles to. On this JAX/XLA
            # CPU build, vmapping the transpose of a compiled scan (`jax.jacrev` of many
            # outputs) gives wrong per-output gradients (tests/model/test_transformer.py).
            for r in range(repeats):
                x, _ = repeat(x, jax.tree.map(lambda a, r=r: a[r], params))
        else:
            unroll = max(1, MAX_UNROLL // len(pattern))
            x, _ = jax.lax.scan(repeat, x, params, unroll=unroll)
        return self.readout(x)

    def run_block(self, block: Block, x: Array, positions: Array, kind: int) -> Array:
        """Block `block` of layer kind `kind` (an index into `config.pattern`) on x (*B, L, D) at
        positions (*B, L), under the model's rematerialisation policy."""
        layer, encoding = self.config.pattern[kind], self.encoding_of(kind)
        if self.remat == "none":
            return block(x, positions, encoding, layer, self.temperature)

        def call(block, x, positions, encoding):
            return block(x, positions, encoding, layer, self.temperature)

        policy = REMAT_POLICIES[self.remat]
        return eqx.filter_checkpoint(call, policy=policy)(block, x, positions, encoding)

    def readout(self, x: Float[Array, "*B L D"]) -> Float[Array, "*B L V"]:
        """Logits in float32 of the last block's output: final norm, then the readout (the
        embedding transposed when tied), times `model.logit_scale`, soft-capped to
        c tanh(logits / c) with `model.logit_softcap` c."""
        h = self.final_norm(x)
        if self.head is None:
            logits = dense(h, self.embedding.astype(h.dtype)).astype(jnp.float32)
        else:
            logits = self.head(h).astype(jnp.float32)
        if self.config.logit_scale != 1.0:
            logits = logits * self.config.logit_scale
        cap = self.config.logit_softcap
        return logits if cap is None else softcap(logits, cap)

    def encoding_of(self, kind: int) -> PositionEncoding:
        """The position encoding of layer kind `kind` (an index into `config.pattern`)."""
        own = self.layer_positions[kind] if self.layer_positions else None
        return self.position if own is None else own

    def embed(
        self, tokens: Int[Array, "*B L"], positions: Int[Array, "*B L"]
    ) -> Float[Array, "*B L D"]:
        """Token embeddings (times sqrt(width) with `model.scale_embedding`) plus any additive
        position embedding, in the compute dtype."""
        x = self.embedding[tokens]
        if self.config.scale_embedding:
            x = x * jnp.sqrt(jnp.float32(self.config.width)).astype(x.dtype)
        pe = self.position.embed(positions)
        if pe is not None:
            x = x + pe
        return x.astype(DTYPES[self.config.dtype])

    def attention_logits(
        self, tokens: Int[Array, " L"], positions: Int[Array, " L"] | None = None
    ) -> Float[Array, "H L L"]:
        """Unmasked attention logits (H, L, L) of the first layer."""
        positions = _default_positions(tokens, positions)
        first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, self.blocks)
        h = first.attention_input(self.embed(tokens, positions))
        kind = self.config.pattern[0]
        return first.attn.logits(h, positions, self.encoding_of(0), kind, self.temperature)

    @property
    def vocab_size(self) -> int:
        """Output vocabulary size."""
        return self.embedding.shape[0]


def softcap(logits: Array, cap: float) -> Array:
    """cap tanh(logits / cap), elementwise: near the identity for |logits| << cap, never past
    +-cap."""
    return cap * jnp.tanh(logits / cap)


def _default_positions(tokens: Array, positions: Array | None) -> Array:
    """Positions broadcast to tokens' shape (*B, L); None: 0..L-1."""
    if positions is None:
        positions = jnp.arange(tokens.shape[-1], dtype=jnp.int32)
    return jnp.broadcast_to(positions, tokens.shape)


def trainable(model: eqx.Module) -> eqx.Module:
    """Filter spec: True for trainable inexact arrays, False for Frozen buffers and the rest."""
    is_frozen = lambda x: isinstance(x, Frozen)
    return jax.tree.map(
        lambda x: False if is_frozen(x) else eqx.is_inexact_array(x), model, is_leaf=is_frozen
    )


def count_params(model: eqx.Module) -> int:
    """Number of trainable scalars."""
    params = eqx.filter(model, trainable(model))
    return sum(x.size for x in jax.tree.leaves(params))


def count_non_embedding_params(model: Transformer) -> int:
    """Trainable scalars less the embeddings (Kaplan et al. 2020's and Hoffmann et al. 2022's N):
    `count_params` minus the token embedding (V, D), the readout (V, D; once when tied to the
    embedding) and a trained table the model-wide encoding adds to the input (the
    learned encoding's (max_length, D); sinusoidal tables are frozen, so nothing)."""
    embeddings = model.embedding.size + (0 if model.head is None else model.head.weight.size)
    if "embed" in model.config.position.options.hooks:
        embeddings += count_params(model.position)
    return count_params(model) - embeddings


def with_scaling(
    model: Transformer,
    kind: str,
    factor: float,
    params: dict | None = None,
    *,
    seq_len: int | None = None,
) -> Transformer:
    """The same model with its position encodings under a scaling method at seq_len (RoPE's
    frequencies recomputed; dynamic scaling depends on `seq_len`).

    Only encodings that `supports_scaling` change, and in a layer layout only the layer kinds
    with `eval_scaling` (the others keep the trained frequencies).
    """
    cfg = model.config
    if not cfg.supports_scaling:
        return model

    def scaled(encoding: PositionEncoding, position) -> PositionEncoding:
        if not position.options.supports_scaling:
            return encoding
        return position.options.with_scaling(
            encoding,
            cfg.with_position(position),
            train_length=model.train_length,
            kind=kind,
            factor=factor,
            params=params,
            seq_len=seq_len,
        )

    if not cfg.layers:
        return eqx.tree_at(lambda m: m.position, model, scaled(model.position, cfg.position))
    layer_positions = tuple(
        model.encoding_of(i)
        if not layer.eval_scaling
        else scaled(model.encoding_of(i), cfg.layer_position(layer))
        for i, layer in enumerate(cfg.layers)
    )
    # the model-wide encoding keeps embedding the input; layers that use it get their own copy
    return eqx.tree_at(lambda m: m.layer_positions, model, layer_positions)


def at_length(model: Transformer, length: int) -> Transformer:
    """The model with a length-dependent trained scaling (dynamic NTK, LongRoPE) taken at
    `length`, as Hugging Face's rotary embedding does for a forward of `length` tokens (for
    dynamic NTK only past the trained length); the model itself for every other encoding."""
    if not model.config.supports_scaling:
        return model
    kind, factor, params = model.config.scaled_position.options.trained_scaling()
    if not SCALINGS[kind].length_dependent:
        return model
    return with_scaling(model, kind, factor, thaw(params), seq_len=length)


def with_remat(model: Transformer, policy: str) -> Transformer:
    """The same model with its blocks run under rematerialisation `policy` (`none` or a key of
    REMAT_POLICIES); the same numbers to float rounding, less memory kept for the backward."""
    if policy != "none" and policy not in REMAT_POLICIES:
        raise ValueError(f"unknown rematerialisation policy {policy!r}")
    out = copy.copy(model)
    object.__setattr__(out, "remat", policy)  # a static field
    return out


def with_temperature(model: Transformer, temperature: float) -> Transformer:
    """The same model with every attention logit multiplied by `temperature` (bias included;
    the zero-shot one at length L: `trial.scaling_plan.log_length_temperature(L, L_train)`)."""
    out = copy.copy(model)
    object.__setattr__(out, "temperature", float(temperature))  # a static field
    return out

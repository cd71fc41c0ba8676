"""Per-layer attention statistics of a forward pass, for evaluation (`eval.attention_stats`).

`layer_statistics(model, tokens, positions)` runs the model's blocks with attention computed by
the reference path (`attention.reference_weights`: each query block against its causal key
prefix, the pairs the reference forward holds anyway) and returns, per layer, sequence and
head, what the attention variants call for:

- `first_token_mass`: the weight on key 0, mean over queries i >= 1 (query 0 sees only key 0);
- `sink_mass` (a variant with a prior logit, `sinks`): the weight left to the prior, 1 - the
  row's weight on keys, mean over the same queries;
- `gate_mean` (an output gate, `gated`, `gated_head`, `fox_pro`): sigmoid(x W_gate) mean over
  tokens and the head's gate features;
- `log_forget` (a forget gate, `fox`, `fox_pro`): log f = log sigmoid(x w + b) mean over tokens
  (the effective window 1 / (-mean log f) is taken after averaging over sequences).

A statistic a variant does not have is absent. The readout is skipped: no logits over the
vocabulary are formed.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model.attention import expand_kv, reference_weights
from rope_lab.model.transformer import Block, Transformer

STATISTICS = ("first_token_mass", "sink_mass", "gate_mean", "log_forget")


@eqx.filter_jit
def layer_statistics(
    model: Transformer, tokens: Int[Array, "B L"], positions: Int[Array, "B L"]
) -> dict[str, Float[Array, "depth B H"]]:
    """Each statistic of `STATISTICS` the model's variant has (module docstring), per layer,
    sequence and head, (depth, B, H) float32."""
    x = model.embed(tokens, positions)
    pattern = model.config.pattern
    per_layer: list[dict[str, Array]] = []
    for depth in range(model.config.depth):
        block = jax.tree.map(lambda a, d=depth: a[d] if eqx.is_array(a) else a, model.blocks)
        kind = depth % len(pattern)
        x, stats = _block_statistics(
            block, x, positions, model.encoding_of(kind), pattern[kind], model.temperature
        )
        per_layer.append(stats)
    return {name: jnp.stack([s[name] for s in per_layer]) for name in per_layer[0]}


def _block_statistics(
    block: Block, x: Array, positions: Array, encoding, layer, temperature: float
) -> tuple[Float[Array, "B L D"], dict[str, Float[Array, "B H"]]]:
    """The block's output (B, L, D), as `Block.__call__` computes it with the reference path,
    and its statistics, each (B, H)."""
    attn = block.attn
    h = block.attention_input(x)
    q, k, v = attn.project(h, positions, encoding)
    k, v = expand_kv(k, attn.heads), expand_kv(v, attn.heads)
    rows = attn.row_scale(positions, layer, temperature)
    heads_shape = (x.shape[0], attn.heads, x.shape[1])
    rows = None if rows is None else jnp.broadcast_to(rows, heads_shape).astype(jnp.float32)
    decay = attn.log_decay(h)

    def per_sequence(q, k, v, positions, rows, decay):
        blocks = reference_weights(
            q,
            k,
            positions,
            encoding,
            variant=attn.variant,
            scale=attn.scale,
            window=layer.window,
            row_scale=rows,
            log_decay=decay,
        )
        out = jnp.concatenate(
            [jnp.einsum("hqk,hkd->hqd", w.astype(v.dtype), v[:, :stop]) for _, stop, w in blocks],
            axis=1,
        )
        first = jnp.concatenate([w[:, :, 0] for _, _, w in blocks], axis=1)  # (H, L)
        on_keys = jnp.concatenate([w.sum(-1) for _, _, w in blocks], axis=1)  # (H, L)
        return out, first, on_keys

    out, first, on_keys = jax.vmap(per_sequence)(q, k, v, positions, rows, decay)
    stats = {"first_token_mass": first[..., 1:].mean(-1)}
    if attn.variant.prior_logit() is not None:
        stats["sink_mass"] = (1.0 - on_keys[..., 1:]).mean(-1)
    if attn.gate is not None:
        gate = jax.nn.sigmoid(attn.gate(h).astype(jnp.float32))
        stats["gate_mean"] = gate.reshape(*gate.shape[:2], attn.heads, -1).mean((1, 3))
    if attn.forget is not None:
        stats["log_forget"] = jax.nn.log_sigmoid(attn.forget(h).astype(jnp.float32)).mean(1)
    return block.finish(x, attn.output(h, out)), stats

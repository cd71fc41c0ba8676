"""The optimiser of a training run: clip -> Adam -> decoupled weight decay -> muP learning-rate
multipliers -> warmup + cosine schedule.

The policy is per parameter group: weight decay on the weight matrices of `Linear` layers only
(`decay_mask`), and under muP the hidden and readout weights' learning rate scaled by
base_width / width (`lr_multipliers`; the parametrisation table is in
`rope_lab.model.transformer`). Frozen buffers are not parameters (`trainable`), so they are
never updated.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import optax

from rope_lab.config import TrainConfig
from rope_lab.model.layers import Linear
from rope_lab.model.transformer import Transformer, trainable


def lr_schedule(cfg: TrainConfig, lr: float | None = None) -> optax.Schedule:
    """Linear warmup to `lr`, cosine decay to lr x min_lr_ratio at `steps`."""
    peak = cfg.lr if lr is None else lr
    warmup = min(cfg.warmup_steps, max(cfg.steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else peak,
        peak_value=peak,
        warmup_steps=warmup,
        decay_steps=max(cfg.steps, warmup + 1),
        end_value=peak * cfg.min_lr_ratio,
    )


def make_optimizer(
    cfg: TrainConfig, model: Transformer, lr: float | None = None
) -> optax.GradientTransformation:
    """Clip -> Adam -> decoupled weight decay on Linear weights -> muP multipliers -> schedule."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.scale_by_adam(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps),
        optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask(model)),
        _scale_by_tree(lr_multipliers(model)),
        optax.scale_by_learning_rate(lr_schedule(cfg, lr)),
    )


def lr_multipliers(model: Transformer) -> eqx.Module:
    """Per-leaf learning-rate multipliers (muP: hidden and readout weights x base/width)."""
    cfg = model.config
    ratio = cfg.base_width / cfg.width if cfg.parametrization == "mup" else 1.0
    return _per_leaf(model, ratio, 1.0)


def decay_mask(model: Transformer) -> eqx.Module:
    """True for weight matrices of Linear layers (decayed); biases, embeddings, tables, norms:
    False."""
    return _per_leaf(model, True, False)


def _per_leaf(model: eqx.Module, linear_weight, other) -> eqx.Module:
    """Pytree shaped like the trainable params: `linear_weight` on Linear weights, else `other`."""
    params = eqx.filter(model, trainable(model))
    is_linear = lambda x: isinstance(x, Linear)

    def value(x):
        if not is_linear(x):
            return other
        if x.bias is not None:  # a projection's bias is not decayed
            x = eqx.tree_at(lambda lin: lin.bias, x, other)
        return eqx.tree_at(lambda lin: lin.weight, x, linear_weight)

    return jax.tree.map(value, params, is_leaf=is_linear)


def _scale_by_tree(multipliers: Any) -> optax.GradientTransformation:
    """Multiply each update leaf by the matching leaf of `multipliers` (stateless)."""

    def update(updates, state, params=None):
        del params
        return jax.tree.map(lambda u, m: u * m, updates, multipliers), state

    return optax.GradientTransformation(lambda _: optax.EmptyState(), update)


__all__ = ["decay_mask", "lr_multipliers", "lr_schedule", "make_optimizer"]

"""The linearised twin of a network (`train.regime: lazy`): its first-order Taylor expansion
around initialisation,

    f_lin(theta)(x) = f(theta_0)(x) + J(theta_0)(x) (theta - theta_0),

computed with one `jax.jvp` of the network at theta_0 in the direction theta - theta_0 (the
primal output and the tangent come from the same forward).

A lazy twin (`linearize(network)`, of class `lazy_class(type(network))`, e.g.
`LazyTransformer`; any model family's network) is an instance of the network's own class whose
own parameters are theta (trained exactly as a rich model's: same data, loss, optimiser,
schedule, parameter groups and weight decay, which pulls theta, not theta - theta_0, towards 0)
and which holds theta_0 in a `Frozen` (excluded from the optimiser and from the NTK parameters, its
gradients stopped). Its forward runs the network with its *own* non-trainable part (the
encodings' frozen buffers and static fields) for both the expansion point and the tangent, so
whatever changes that part changes both terms: `with_scaling` (RoPE frequencies) and
`with_temperature` give the expansion of the scaled network, f_s(theta_0) + J_s(theta_0)(theta -
theta_0), and evaluation, fine-tuning and NTK tracking need no code of their own. Its
parameter tree is the network's (the same paths, groups and decay mask) plus `theta0`; a
checkpoint or `model.eqx` holds both.

Its empirical NTK with respect to theta is J(theta_0) J(theta_0)^T at every theta: the
network's NTK at initialisation, constant through training.

Attention: the blocked kernel has a custom VJP, which `jax.jvp` cannot pass, so a lazy model
runs the reference path (plain JAX: forward mode and the reverse mode of the JVP, which training
needs, both work); `model.attention: auto` resolves to `reference` (`lazy_model_config`) and an
explicit `blocked` or `cudnn` is a ConfigError (`rope_lab.trial.config.check_train`). Its memory
grows with L^2 like the reference path's. Cached decoding (`rope_lab.model.decode`) runs a
Transformer's blocks one token at a time and has no linearised form: the decode stage is
rejected for lazy trials.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.config import ModelConfig
from rope_lab.model.positions.modules import Frozen
from rope_lab.model.transformer import Transformer, trainable


def lazy_model_config(cfg: ModelConfig) -> ModelConfig:
    """The model config a lazy twin is built with: `attention: auto` resolved to `reference`
    (the path `jax.jvp` passes); anything else unchanged."""
    if cfg.attention == "auto":
        return dataclasses.replace(cfg, attention="reference")
    return cfg


def linearized_call(
    network: eqx.Module,
    theta0: Any,
    tokens: Int[Array, "*B L"],
    positions: Int[Array, "*B L"] | None,
) -> Float[Array, "*B L V"]:
    """f(theta_0)(x) + J(theta_0)(x)(theta - theta_0), x = (tokens, positions): `network` holds
    theta and the non-trainable part used for both terms; `theta0` the trainable leaves at the
    expansion point (any pytree with theta's leaves in order: a tuple of arrays).
    Logits (*B, L, V)."""
    params, static = eqx.partition(network, trainable(network))
    # theta_0's leaves in theta's tree: static fields (a temperature) may differ, leaves do not
    p0 = jax.tree.unflatten(jax.tree.structure(params), jax.tree.leaves(theta0))
    p0 = jax.lax.stop_gradient(p0)
    delta = jax.tree.map(jnp.subtract, params, p0)

    def f(p):
        return eqx.combine(p, static)(tokens, positions)

    out, tangent = jax.jvp(f, (p0,), (delta,))
    return out + tangent


class Linearized(eqx.Module):
    """Base of every lazy twin (`lazy_class`): theta is the network part of the twin (the
    fields of the network's class, `base`), `theta0` the frozen trainable leaves at
    initialisation, as a flat tuple in the network's leaf order (no modules inside, so the
    optimiser's per-module policy never sees them).
    `model(tokens (*B, L), positions) -> logits (*B, L, V)` as the network's."""

    theta0: Frozen
    base: ClassVar[type]  # the network's class

    def __init__(self, network: eqx.Module):
        for f in dataclasses.fields(self.base):
            setattr(self, f.name, getattr(network, f.name))
        # copies: theta_0 must not share buffers with theta, which a train step donates
        leaves = jax.tree.leaves(eqx.filter(network, trainable(network)))
        self.theta0 = Frozen(tuple(jnp.array(x, copy=True) for x in leaves))  # type: ignore[arg-type]

    def network(self) -> Any:
        """The plain network at theta with this model's buffers and static fields."""
        net: Any = object.__new__(self.base)
        for f in dataclasses.fields(self.base):
            object.__setattr__(net, f.name, getattr(self, f.name))
        return net

    def __call__(
        self, tokens: Int[Array, "*B L"], positions: Int[Array, "*B L"] | None = None
    ) -> Float[Array, "*B L V"]:
        """f_lin(theta)(tokens, positions): logits (*B, L, V) for tokens (*B, L)."""
        return linearized_call(self.network(), self.theta0.value, tokens, positions)

    def attention_logits(self, tokens: Array, positions: Array | None = None) -> Array:
        """Not defined: a linearised model has no attention logits of its own."""
        raise NotImplementedError("a lazy (linearised) model has no attention logits of its own")


@functools.cache
def lazy_class(cls: type) -> type:
    """The lazy twin's class of a network class `cls`: a subclass of both `Linearized` and
    `cls`, so its parameter paths (NTK parameter groups, decay mask, muP multipliers), its
    attributes (`config`, `position`, `embedding`, `head`, ...) and every function of the
    network's fields (`with_scaling`, `with_temperature`) are the network's; only the forward
    and `theta0` are added. One class per network class (cached)."""
    return type(f"Lazy{cls.__name__}", (Linearized, cls), {"base": cls, "__module__": __name__})


LazyTransformer = lazy_class(Transformer)


def linearize(network: Any) -> Any:
    """The lazy twin of `network` (any family's network) expanded around its current
    parameters (theta = theta_0 at first)."""
    cls: Any = type(network)
    return lazy_class(cls)(network)


__all__ = [
    "LazyTransformer",
    "Linearized",
    "lazy_class",
    "lazy_model_config",
    "linearize",
    "linearized_call",
]

"""Attention sinks as learned logits (`model.attention_fn: sinks`; gpt-oss): one logit s_h per
head and layer joins every row's softmax normaliser as a key of zero value,

    a_ij = exp(z_ij) / (exp(s_h) + sum_{j' visible} exp(z_ij')),

so a query can put mass on "nothing" instead of on the first tokens (StreamingLLM's sink
tokens, learned). s starts at 0: the sink weighs like one key of logit 0."""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.registry import ATTENTION_FNS


@ATTENTION_FNS.register("sinks")
@dataclass(frozen=True)
class Sinks(AttentionFnConfig):
    """A learned sink logit per head (`prior_logit`)."""

    order = 1

    def init_params(self, model, *, key):
        """(H,) zeros: the sink logits s_h."""
        import jax.numpy as jnp  # deferred: imports JAX

        return jnp.zeros((model.n_heads,), jnp.float32)

    def n_params(self, model) -> int:
        """One logit per head."""
        return model.n_heads

    def prior_logit(self, params):
        """The sink logits themselves."""
        return params

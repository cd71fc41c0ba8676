"""The `normaliser` hook of an attention variant: every path calls the variant's own weights and
kernel in place of softmax, and a variant whose normaliser cannot serve every path is refused
when its class is defined."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.model import attention, flash
from rope_lab.model.attention_fns.base import AttentionFnConfig, Normaliser
from rope_lab.model.attention_logits import MASKED, Variant

HEADS, LENGTH, DH = 2, 8, 4


class _Uniform(Normaliser):
    """Equal weights over the keys before the query; its blocked kernel returns 7s, a value no
    softmax gives, so a test sees which code ran."""

    own_key = False

    def row_weights(self, logits):
        seen = (logits > MASKED / 2).astype(jnp.float32)
        return seen / jnp.maximum(seen.sum(-1, keepdims=True), 1.0)

    def blocked(self, q, k, v, encoding, row_scale, positions, plan):
        return jnp.full(v.shape, 7.0, v.dtype)


@dataclass(frozen=True)
class _UniformFn(AttentionFnConfig):
    name = "uniform"
    order = 99
    normaliser = _Uniform()


def _operands():
    return jax.random.normal(jax.random.PRNGKey(0), (3, HEADS, LENGTH, DH))


def test_every_path_calls_the_variants_normaliser_and_hides_what_it_hides() -> None:
    """The reference path gives the mean of the values before each query (query 0 reads
    nothing: own key hidden); the blocked kernel is the normaliser's (7s), padding removed."""
    q, k, v = _operands()
    variant = Variant(_UniformFn())
    positions = jnp.arange(LENGTH)
    ref = attention.reference_attention(q, k, v, positions, None, variant=variant, scale=1.0)
    before = jnp.cumsum(v, axis=1) - v
    mean = before / jnp.maximum(jnp.arange(LENGTH), 1)[None, :, None]
    np.testing.assert_allclose(ref, mean, rtol=1e-6, atol=1e-6)
    blocked = flash.blocked_attention(q, k, v, positions, None, variant=variant, scale=1.0, block=3)
    assert blocked.shape == v.shape and bool(jnp.all(blocked == 7.0))


def test_a_normaliser_missing_a_hook_cannot_be_made() -> None:
    """A normaliser without its blocked kernel fails where the variant's class body makes it."""

    class NoKernel(Normaliser):
        def row_weights(self, logits):
            return logits

    with pytest.raises(TypeError, match=r"abstract method.*\bblocked\b"):

        @dataclass(frozen=True)
        class _Broken(AttentionFnConfig):
            normaliser = NoKernel()  # type: ignore[abstract]


def test_a_normaliser_with_what_its_kernel_cannot_take_is_refused_naming_the_class() -> None:
    """A normaliser with a forget gate, a prior logit or cuDNN, or one that is not a
    Normaliser, is refused when the class is defined, naming it."""
    with pytest.raises(TypeError) as err:

        class _WithGate(AttentionFnConfig):
            normaliser = _Uniform()
            forget_gate = True
            fused_ok = True

    assert str(err.value) == (
        "_WithGate: a normaliser (_Uniform) replaces softmax on every path and takes no "
        "forget_gate, fused_ok"
    )
    with pytest.raises(TypeError, match=r"_WithPrior: .* takes no prior_logit$"):

        class _WithPrior(AttentionFnConfig):
            normaliser = _Uniform()

            def prior_logit(self, params):
                return params

    with pytest.raises(TypeError, match=r"^_NotOne.normaliser: 'softmax' is not a Normaliser$"):

        class _NotOne(AttentionFnConfig):
            normaliser = "softmax"  # type: ignore[assignment]

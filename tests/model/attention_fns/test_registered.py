"""Laws every registered attention variant (`model.attention_fn`) obeys on every path: the
reference path, the blocked kernel (forward and custom-VJP gradients, its parameters
included), cached decoding, the model's forward under `auto`, and cuDNN, which computes the
variant or refuses it naming it. A new variant is run through all of them by being registered."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model import attention
from rope_lab.model.attention_logits import Variant
from rope_lab.model.factory import make_model
from rope_lab.registry import ATTENTION_FNS
from tests.helpers import tiny_trial
from tests.model.test_decode import TOKENS, assert_equals_teacher_forcing, jittered

NAMES = ATTENTION_FNS.names()
HEADS, DH = 3, 4


def _variant(name: str, seed: int = 0) -> Variant:
    """The variant with its parameters moved off their initial values (a sink of 0 would be
    one case only)."""
    cfg = tiny_trial(width=HEADS * DH, head_dim=DH).model
    fn = ATTENTION_FNS[name]()
    params = fn.init_params(cfg, key=jax.random.PRNGKey(seed))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), max(len(leaves), 1))
    moved = [x + jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=False)]
    return Variant(fn, jax.tree.unflatten(tree, moved))


def _operands(seed: int, length: int):
    return jax.random.normal(jax.random.PRNGKey(seed), (3, HEADS, length, DH))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("length", "block", "window"), [(13, 4, None), (16, 16, 5), (9, 2, 1)])
def test_blocked_equals_reference_forward_and_gradients(name, length, block, window):
    variant = _variant(name)
    q, k, v = _operands(1, length)
    positions = jnp.arange(length) + 3
    cot = jax.random.normal(jax.random.PRNGKey(9), (HEADS, length, DH))
    kw = {"scale": 0.45, "window": window}
    blocked = functools.partial(attention.blocked_attention, block=block, **kw)
    reference = functools.partial(attention.reference_attention, **kw)

    def loss(fn, q, k, v, variant):
        return jnp.sum(fn(q, k, v, positions, None, variant=variant) * cot)

    want = reference(q, k, v, positions, None, variant=variant)
    got = blocked(q, k, v, positions, None, variant=variant)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    g_want = jax.grad(loss, argnums=(1, 2, 3, 4))(reference, q, k, v, variant)
    g_got = jax.grad(loss, argnums=(1, 2, 3, 4))(blocked, q, k, v, variant)
    for a, b in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_the_model_decodes_as_it_forwards(name):
    """A forget gate's cumulative log gates included (`LayerCache.decay`)."""
    cfg = validate(
        replace(
            tiny_trial(width=16, head_dim=4, depth=2, length=8),
            **{"eval.length_multipliers": (1.0, 2.0), "model.attention_fn": name},
        )
    )
    assert_equals_teacher_forcing(jittered(make_model(cfg)), TOKENS)


@pytest.mark.parametrize("name", NAMES)
def test_reference_and_blocked_models_agree(name):
    base = replace(
        tiny_trial(width=16, head_dim=4, depth=2, length=8),
        **{"eval.length_multipliers": (1.0, 2.0)},
    )
    models = [
        jittered(make_model(validate(replace(base, **{"model.attention_fn": name,
                                                      "model.attention": impl}))))
        for impl in ("reference", "blocked")
    ]  # fmt: skip
    tokens = TOKENS[:12]
    np.testing.assert_allclose(models[0](tokens), models[1](tokens), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", NAMES)
def test_cudnn_computes_the_variant_or_refuses_it_naming_it(name):
    fn = ATTENTION_FNS[name]()
    cfg = replace(tiny_trial(), **{"model.attention_fn": name, "model.attention": "cudnn"})
    if fn.fused_ok:
        validate(cfg)
        return
    with pytest.raises(ConfigError, match=rf"cudnn cannot compute model.attention_fn '{name}'"):
        validate(cfg)
    with pytest.raises(ConfigError, match=rf"model.attention_fn '{name}'"):
        attention.choose("cudnn", 16, jnp.bfloat16, has_bias=False, variant=fn)
    assert attention.choose("auto", 16, jnp.bfloat16, has_bias=False, variant=fn) != "cudnn"


@pytest.mark.parametrize("name", NAMES)
def test_the_variant_declares_its_parameter_count(name):
    from rope_lab.model.transformer import count_params
    from rope_lab.sweep.plan import estimate_cost

    cfg = validate(replace(tiny_trial(depth=2), **{"model.attention_fn": name}))
    model = make_model(cfg)
    assert estimate_cost(cfg)["n_params"] == count_params(model)
    plain = make_model(validate(tiny_trial(depth=2)))
    fn, m = cfg.model.attention_options, cfg.model
    own = fn.n_params(m) + m.width * fn.projected_features(m)  # its arrays and projections
    assert count_params(model) - count_params(plain) == 2 * own

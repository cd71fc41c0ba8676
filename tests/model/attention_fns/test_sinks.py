"""Attention sinks (`model.attention_fn: sinks`) against an independent dense transcription of
a_ij = exp(z_ij) / (exp(s_h) + sum_j' exp(z_ij')), on every path, with its limits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, from_dict, replace, validate
from rope_lab.model import attention
from rope_lab.model.attention_fns.sinks import Sinks
from rope_lab.model.attention_logits import SOFTMAX, Variant
from tests.helpers import tiny_trial

HEADS, LENGTH, DH = 3, 11, 4


def dense(q, k, v, sinks, scale, window=None):
    """(H, L, Dh) attention with one sink logit per head in each row's normaliser, written out
    over the whole (H, L, L) in float64 NumPy."""
    q, k, v, sinks = (np.asarray(x, np.float64) for x in (q, k, v, sinks))
    z = np.einsum("hqd,hkd->hqk", q, k) * scale
    i, j = np.arange(q.shape[1])[:, None], np.arange(q.shape[1])[None, :]
    visible = (j <= i) if window is None else (j <= i) & (i - j < window)
    e = np.where(visible[None], np.exp(z), 0.0)
    weights = e / (np.exp(sinks)[:, None, None] + e.sum(-1, keepdims=True))
    return np.einsum("hqk,hkd->hqd", weights, v)


def dense_jax(q, k, v, sinks, scale):
    """The same in JAX (for its autodiff gradients), causal."""
    z = jnp.einsum("hqd,hkd->hqk", q, k) * scale
    visible = jnp.tril(jnp.ones((q.shape[1], q.shape[1]), bool))
    e = jnp.where(visible[None], jnp.exp(z), 0.0)
    return jnp.einsum("hqk,hkd->hqd", e / (jnp.exp(sinks)[:, None, None] + e.sum(-1)[..., None]), v)


def _operands(seed=0):
    q, k, v = jax.random.normal(jax.random.PRNGKey(seed), (3, HEADS, LENGTH, DH))
    sinks = jax.random.normal(jax.random.PRNGKey(seed + 1), (HEADS,)) * 2.0
    return q, k, v, sinks


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("path", ["reference", "blocked"])
def test_each_path_equals_the_dense_formula(path, window):
    q, k, v, sinks = _operands()
    positions = jnp.arange(LENGTH)
    fn = {"reference": attention.reference_attention, "blocked": attention.blocked_attention}
    out = fn[path](q, k, v, positions, None, variant=Variant(Sinks(), sinks), scale=0.6,
                   window=window)  # fmt: skip
    np.testing.assert_allclose(out, dense(q, k, v, sinks, 0.6, window), rtol=2e-5, atol=2e-6)


def test_the_blocked_gradients_equal_the_dense_formulas():
    q, k, v, sinks = _operands(3)
    positions = jnp.arange(LENGTH)
    cot = jax.random.normal(jax.random.PRNGKey(5), (HEADS, LENGTH, DH))

    def blocked(q, k, v, sinks):
        out = attention.blocked_attention(
            q, k, v, positions, None, variant=Variant(Sinks(), sinks), scale=0.6, block=4
        )
        return jnp.sum(out * cot)

    def want(q, k, v, sinks):
        return jnp.sum(dense_jax(q, k, v, sinks, 0.6) * cot)

    got = jax.grad(blocked, argnums=(0, 1, 2, 3))(q, k, v, sinks)
    ref = jax.grad(want, argnums=(0, 1, 2, 3))(q, k, v, sinks)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert np.all(np.asarray(got[3]) != 0)


def test_the_limits():
    """s -> -inf is plain softmax; s -> +inf takes all the mass (outputs -> 0); the weights on
    the keys sum to 1 / (1 + exp(s - lse_keys)) < 1."""
    q, k, v, _ = _operands(7)
    positions = jnp.arange(LENGTH)
    run = lambda variant: attention.reference_attention(
        q, k, v, positions, None, variant=variant, scale=0.5
    )
    low = Variant(Sinks(), jnp.full((HEADS,), -80.0))
    np.testing.assert_allclose(run(low), run(SOFTMAX), rtol=1e-6, atol=1e-7)
    high = Variant(Sinks(), jnp.full((HEADS,), 60.0))
    assert float(jnp.abs(run(high)).max()) < 1e-20
    ones = jnp.ones_like(v)
    mass = attention.reference_attention(
        q, k, ones, positions, None, variant=Variant(Sinks(), jnp.zeros(HEADS)), scale=0.5
    )[..., 0]
    z = np.einsum("hqd,hkd->hqk", np.asarray(q, np.float64), np.asarray(k, np.float64)) * 0.5
    causal = np.tril(np.ones((LENGTH, LENGTH), bool))
    keys = np.where(causal[None], np.exp(z), 0.0).sum(-1)
    np.testing.assert_allclose(mass, keys / (1.0 + keys), rtol=2e-6)


def test_a_sinks_trial_is_its_own_trial_labelled_and_refused_where_it_cannot_run():
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.results.columns import flatten_config

    base = validate(tiny_trial())
    sinks = validate(replace(base, **{"model.attention_fn": "sinks"}))
    assert sinks.trial_id != base.trial_id
    assert sinks.trial_id.startswith("passkey-rope-sinks-w32-d1-L16-s0-")
    row = pl.DataFrame([{**flatten_config(sinks), "method": "none", "factor": 1.0}])
    assert row.select(label_expr(row.columns))["label"].item() == "rope +sinks"
    cnn = {"model": {"family": "cnn", "width": 16, "attention_fn": "sinks"}}
    with pytest.raises(ConfigError, match=r"^model\.attention_fn: model.family 'cnn' has no use"):
        validate(from_dict(type(base), cnn))
    with pytest.raises(ConfigError, match=r"model\.attention_fn: unknown value 'sink'"):
        from_dict(type(base), {"model": {"attention_fn": "sink"}})

"""Stick-breaking attention (`model.attention_fn: stick_breaking`) against an independent dense
transcription of A_ij = sigmoid(z_ij) prod_{l=j+1}^{i-1} (1 - sigmoid(z_il)) over keys j < i
(explicit loops over i, j and l): values and gradients on the reference path and the blocked
kernel, a sliding window, stability at L = 4096 with large logits, the model on both paths, and
its refusals."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, LayerConfig, replace, validate
from rope_lab.model import attention, flash
from rope_lab.model.attention_fns.stick_breaking import StickBreaking
from rope_lab.model.attention_logits import Variant
from rope_lab.model.factory import make_model
from tests.helpers import tiny_trial
from tests.model.test_decode import TOKENS, assert_equals_teacher_forcing, jittered

STICK = Variant(StickBreaking())
HEADS, DH, LENGTH, SCALE = 2, 4, 9, 0.6
reference = functools.partial(attention.reference_attention, variant=STICK, scale=SCALE)
blocked = functools.partial(attention.blocked_attention, variant=STICK, scale=SCALE, block=4)


def dense(q, k, v, window=None, xp=np):
    """(H, L, Dh): for each query i and key j < i inside the window, sigmoid(z_ij) times the
    product of (1 - sigmoid(z_il)) over the l strictly between them, summed against v_j, every
    head at once. `xp`: NumPy (float64 values) or jax.numpy (autodiff gradients)."""
    shares = 1.0 / (1.0 + xp.exp(-xp.einsum("hqd,hkd->hqk", q, k) * SCALE))
    rows = []
    for i in range(q.shape[1]):
        row = xp.zeros_like(v[:, 0])
        for j in range(i):
            if window is None or i - j < window:
                weight = shares[:, i, j] * xp.prod(1.0 - shares[:, i, j + 1 : i], axis=-1)
                row = row + weight[:, None] * v[:, j]
        rows.append(row)
    return xp.stack(rows, axis=1)


def _operands(seed: int, length: int = LENGTH):
    return jax.random.normal(jax.random.PRNGKey(seed), (3, HEADS, length, DH))


def _grads(fn, cot):
    """d/d(q, k, v) of sum(fn(q, k, v) * cot), jitted (one trace of the loops)."""
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) * cot), argnums=(0, 1, 2)))


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("path", [reference, blocked], ids=["reference", "blocked"])
def test_both_paths_equal_the_dense_product_in_values_and_gradients(path, window):
    q, k, v = _operands(1)
    positions = jnp.arange(LENGTH)
    got = path(q, k, v, positions, None, window=window)
    want = dense(*(np.asarray(x, np.float64) for x in (q, k, v)), window=window)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert np.abs(got[:, 0]).max() == 0.0  # query 0 has no key before it
    cot = jax.random.normal(jax.random.PRNGKey(2), q.shape)
    grads = _grads(lambda q, k, v: path(q, k, v, positions, None, window=window), cot)(q, k, v)
    oracle = _grads(lambda q, k, v: dense(q, k, v, window, jnp), cot)(q, k, v)
    for a, b in zip(grads, oracle, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_blocked_equals_reference_with_a_learned_bias_and_a_row_scale():
    """KERPLE's learned bias parameters and each query's row scale get the reference path's
    autodiff gradients through the blocked kernel's custom VJP, keys and blocks not dividing
    the length, a window spanning blocks."""
    length = 19
    q, k, v = _operands(3, length)
    rows = jax.random.uniform(jax.random.PRNGKey(4), (HEADS, length), minval=0.2, maxval=2.0)
    encoding = jittered(make_model(tiny_trial("kerple_log", width=8, head_dim=4)).position)
    positions = jnp.arange(length)

    def grads(path):
        def loss(ops):
            q, k, v, enc, r = ops
            return jnp.sum(jnp.sin(path(q, k, v, positions, enc, window=7, row_scale=r)))

        return eqx.filter_jit(eqx.filter_grad(loss))((q, k, v, encoding, rows))

    want, got = grads(reference), grads(functools.partial(blocked, block=5))
    assert float(np.abs(want[4]).max()) > 1e-3
    leaves = list(zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True))
    assert len(leaves) == 4 + len(jax.tree.leaves(eqx.filter(encoding, eqx.is_inexact_array)))
    for a, b in leaves:
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def test_far_keys_gradients_keep_float32_precision_at_1024_keys():
    """The blocked kernel's gradients equal the reference path's autodiff to 1e-5 of their
    size at L = 1024, where each far key's sigmoid(z) multiplies any rounding of the farther
    keys' sum of ds (a sum taken as delta_i less the nearer keys' is 50 times further off)."""
    length = 1024
    q, k, v = 2.0 * jax.random.normal(jax.random.PRNGKey(8), (3, 1, length, 8))
    cot = jax.random.normal(jax.random.PRNGKey(9), q.shape)
    positions = jnp.arange(length)
    want = _grads(lambda q, k, v: reference(q, k, v, positions, None), cot)(q, k, v)
    got = _grads(lambda q, k, v: blocked(q, k, v, positions, None, block=128), cot)(q, k, v)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5 * float(np.abs(b).max()))


def test_large_logits_at_4096_keys_stay_finite_and_pick_the_nearest_positive_key():
    """|z| = 100 everywhere: each query reads the value of its nearest earlier key with z > 0
    (sigmoid 1, every farther key's share times sigmoid(-100)), or nothing when there is none;
    dv_j sums the cotangents of the queries that read key j. No NaN or inf, values or
    gradients."""
    length = 4096
    signs = jax.random.rademacher(jax.random.PRNGKey(5), (2, 1, length, 1), jnp.float32)
    q, k = signs[0] * 10.0, signs[1] * 10.0 / SCALE  # z = +-100
    v = jax.random.normal(jax.random.PRNGKey(6), (1, length, 3))
    cot = jax.random.normal(jax.random.PRNGKey(7), (1, length, 3))
    positive = np.asarray(q[0, :, 0])[:, None] * np.asarray(k[0, :, 0])[None, :] > 0
    nearest = np.full(length, -1)
    for i in range(length):
        before = np.flatnonzero(positive[i, :i])
        nearest[i] = before[-1] if len(before) else -1
    read = nearest >= 0
    want = np.where(read[:, None], np.asarray(v[0])[np.maximum(nearest, 0)], 0.0)
    want_dv = np.zeros((length, 3))
    np.add.at(want_dv, nearest[read], np.asarray(cot[0])[read])
    fn = jax.jit(lambda q, k, v: blocked(q, k, v, jnp.arange(length), None, block=512))
    out = fn(q, k, v)
    dq, dk, dv = jax.grad(lambda *a: jnp.sum(fn(*a) * cot), argnums=(0, 1, 2))(q, k, v)
    for x in (out, dq, dk, dv):
        assert np.isfinite(np.asarray(x)).all()
    np.testing.assert_allclose(out[0], want, atol=1e-6)
    np.testing.assert_allclose(dv[0], want_dv, atol=1e-5)


def test_the_model_gives_the_same_logits_on_reference_and_blocked_and_decoding(monkeypatch):
    """A two-kind Transformer (RoPE, the second kind windowed) in blocks of 4 tokens; cached
    decoding (the windowed kind a ring buffer of 3 slots, the query's own among them) gives
    the forward's logits."""
    monkeypatch.setattr(flash, "BLOCK", 4)
    changes = {
        "eval.length_multipliers": (1.0, 2.0),
        "model.attention_fn": "stick_breaking",
        "model.layers": (LayerConfig(), LayerConfig(window=3)),
    }
    base = replace(tiny_trial(width=16, head_dim=4, depth=2, length=8), **changes)
    models = [
        jittered(make_model(validate(replace(base, **{"model.attention": impl}))))
        for impl in ("reference", "blocked")
    ]
    tokens = TOKENS[:14]
    np.testing.assert_allclose(models[0](tokens), models[1](tokens), rtol=2e-5, atol=2e-5)
    assert_equals_teacher_forcing(models[0], TOKENS)


def test_stick_breaking_is_its_own_trial_refused_where_it_cannot_run():
    base = validate(tiny_trial("none"))
    stick = validate(replace(base, **{"model.attention_fn": "stick_breaking"}))
    assert stick.trial_id.startswith("passkey-none-stick_breaking-w32-d1-L16-s0-")
    with pytest.raises(ConfigError) as error:
        validate(replace(stick, **{"model.scalable_softmax": True}))
    assert str(error.value) == (
        "model.scalable_softmax: model.attention_fn 'stick_breaking' has no softmax whose "
        "normaliser grows with the length; set model.scalable_softmax: false"
    )
    with pytest.raises(ConfigError) as error:
        validate(replace(tiny_trial("cope"), **{"model.attention_fn": "stick_breaking"}))
    assert str(error.value) == (
        "model.position.kind: model.attention_fn 'stick_breaking' cannot take the contextual "
        "positions of 'cope'; use an encoding with additive logits"
    )
    with pytest.raises(ConfigError, match=r"cudnn cannot compute model.attention_fn 'stick_"):
        validate(replace(stick, **{"model.attention": "cudnn"}))

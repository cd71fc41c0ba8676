"""The Forgetting Transformer (`model.attention_fn: fox`, `fox_pro`) against an independent dense
transcription of o_i = sum_j softmax_j(q_i k_j scale + sum_{l=j+1..i} log f_l) v_j with
f_l = sigmoid(x_l w_h + b_h): values and gradients on the reference path and the blocked
kernel, its limits, and its refusals."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model.attention_layer import Attention
from rope_lab.model.factory import make_model
from rope_lab.ntk.kernels import param_group
from tests.helpers import tiny_trial

HEADS, DH, LENGTH = 2, 4, 11
WIDTH = HEADS * DH


def _layer(fn: str, implementation: str = "reference", seed: int = 0, **changes):
    cfg = validate(
        replace(
            tiny_trial("none", width=WIDTH, head_dim=DH),
            **{"model.attention_fn": fn, "model.attention": implementation, **changes},
        )
    )
    layer = Attention(cfg.model, train_length=16, key=jax.random.PRNGKey(seed))
    if layer.forget is not None:  # a bias off 0, so a wrong sign or offset shows
        bias = jax.random.normal(jax.random.PRNGKey(seed + 7), (HEADS,))
        layer = eqx.tree_at(lambda a: a.forget.bias, layer, bias)
    return layer, make_model(cfg).encoding_of(0)


def dense(layer: Attention, x, window: int | None = None):
    """(L, D) output of a NoPE FoX layer in JAX, the decay written as the explicit sum of the
    log forget gates over l = j+1..i (an (L, L, L) indicator), for values and autodiff
    gradients."""
    q, k, v = (x @ getattr(layer, n).weight.T for n in ("q", "k", "v"))
    log_f = jax.nn.log_sigmoid(x @ layer.forget.weight.T + layer.forget.bias[None])  # (L, H)
    i, j, gate = (jnp.arange(len(x)).reshape(s) for s in ((-1, 1, 1), (1, -1, 1), (1, 1, -1)))
    between = ((gate > j) & (gate <= i)).astype(x.dtype)  # (L, L, L): j < l <= i
    decay = jnp.einsum("ijl,lh->hij", between, log_f)
    visible = (j[..., 0] <= i[..., 0]) & (
        True if window is None else (i[..., 0] - j[..., 0] < window)
    )
    heads = []
    for h in range(HEADS):
        part = slice(h * DH, (h + 1) * DH)
        z = q[:, part] @ k[:, part].T * layer.scale + decay[h]
        a = jax.nn.softmax(jnp.where(visible, z, -jnp.inf), axis=-1)
        heads.append(a @ v[:, part])
    out = jnp.concatenate(heads, axis=-1)
    if layer.gate is not None:
        out = out * jax.nn.sigmoid(x @ layer.gate.weight.T)
    return out @ layer.o.weight.T


@pytest.mark.parametrize("fn", ["fox", "fox_pro"])
@pytest.mark.parametrize("implementation", ["reference", "blocked"])
def test_the_layer_equals_the_dense_formula_in_values_and_gradients(fn, implementation):
    layer, encoding = _layer(fn, implementation)
    x = jax.random.normal(jax.random.PRNGKey(3), (LENGTH, WIDTH))
    positions = jnp.arange(LENGTH)
    got = layer(x, positions, encoding)
    np.testing.assert_allclose(got, dense(layer, x), rtol=2e-5, atol=2e-6)
    cot = jax.random.normal(jax.random.PRNGKey(5), (LENGTH, WIDTH))
    grads = jax.grad(lambda a: jnp.sum(a(x, positions, encoding) * cot))(layer)
    oracle = jax.grad(lambda a: jnp.sum(dense(a, x) * cot))(layer)
    for name in ("q", "k", "v", "forget"):  # the forget gate's weights and biases included
        for a, b in zip(jax.tree.leaves(getattr(grads, name)),
                        jax.tree.leaves(getattr(oracle, name)), strict=True):  # fmt: skip
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_a_sliding_window_and_blocks_that_do_not_divide_the_length():
    layer, encoding = _layer("fox", "blocked", **{"model.layers": ()})
    x = jax.random.normal(jax.random.PRNGKey(4), (LENGTH, WIDTH))
    from rope_lab.config import LayerConfig

    got = layer(x, jnp.arange(LENGTH), encoding, LayerConfig(window=4))
    np.testing.assert_allclose(got, dense(layer, x, window=4), rtol=2e-5, atol=2e-6)


def test_a_gate_that_never_forgets_is_softmax():
    """f -> 1 (a bias of +40: log f ~ -4e-18) leaves the softmax layer with the same weights."""
    fox, encoding = _layer("fox")
    plain, _ = _layer("softmax")
    for name in ("q", "k", "v", "o"):  # the forget gate has its own init key
        np.testing.assert_array_equal(getattr(fox, name).weight, getattr(plain, name).weight)
    fox = eqx.tree_at(lambda a: a.forget.bias, fox, jnp.full((HEADS,), 40.0))
    x = jax.random.normal(jax.random.PRNGKey(6), (LENGTH, WIDTH))
    positions = jnp.arange(LENGTH)
    np.testing.assert_allclose(
        fox(x, positions, encoding), plain(x, positions, encoding), rtol=1e-6, atol=1e-7
    )
    strong = eqx.tree_at(lambda a: a.forget.bias, fox, jnp.full((HEADS,), -40.0))
    _, _, v = strong.project(x, positions, encoding)  # f -> 0: each query reads its own value
    np.testing.assert_allclose(
        strong(x, positions, encoding), strong.output(x, v), rtol=1e-5, atol=1e-6
    )


def test_fox_is_its_own_trial_refused_where_it_cannot_run():
    base = validate(tiny_trial("none"))
    fox = validate(replace(base, **{"model.attention_fn": "fox"}))
    assert fox.trial_id.startswith("passkey-none-fox-w32-d1-L16-s0-")
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.results.columns import flatten_config

    row = pl.DataFrame([{**flatten_config(fox), "method": "none", "factor": 1.0}])
    assert row.select(label_expr(row.columns))["label"].item() == "none +fox"
    assert param_group(".blocks.attn.forget.weight") == "attention_qk"
    with pytest.raises(ConfigError, match=r"^eval\.decode\.protocols: model.attention_fn 'fox'"):
        validate(replace(fox, **{"eval.decode.protocols": ("prefill_fixed",)}))
    with pytest.raises(ConfigError, match=r"cudnn cannot compute model.attention_fn 'fox'"):
        validate(replace(fox, **{"model.attention": "cudnn"}))

"""The linearised twin (`train.regime: lazy`, rope_lab/model/lazy.py): its output is the
first-order Taylor expansion f(theta_0) + J(theta_0)(theta - theta_0) (against vector-Jacobian
products, reverse mode, no jvp), the expansion of the scaled network under a scaling, jvp of every
registered encoding's model against central finite differences, and its NTK: constant in theta
and equal to the network's NTK at initialisation."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ModelConfig, replace, validate
from rope_lab.model.factory import make_model
from rope_lab.model.lazy import LazyTransformer, Linearized, linearize
from rope_lab.model.transformer import Transformer, trainable, with_scaling, with_temperature
from rope_lab.ntk.kernels import sequence_kernel
from rope_lab.registry import MODELS, POSITIONS
from tests.helpers import tiny_trial

V, L = 24, 8
run = eqx.filter_jit(lambda model, tokens, positions=None: model(tokens, positions))


def lazy_trial(kind: str = "rope", **kw):
    """A tiny lazy trial (width 16, depth 1, L_train 8)."""
    cfg = tiny_trial(kind, width=16, depth=1, length=L, regime="lazy", **kw)
    return validate(replace(cfg, **{"eval.length_multipliers": (1.0, 2.0)}))


def params_of(model):
    """The trainable leaves of `model` and the rest."""
    return eqx.partition(model, trainable(model))


def moved(model, scale: float, seed: int = 3):
    """`model` with theta = theta_0 + d, d Gaussian of std `scale` per leaf; and d."""
    params, static = params_of(model)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    d = jax.tree.unflatten(
        treedef,
        [scale * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)],
    )
    return eqx.combine(jax.tree.map(jnp.add, params, d), static), d


def plain(model: LazyTransformer) -> Transformer:
    """The plain network at theta_0, with `model`'s buffers (built without the lazy forward)."""
    params, static = params_of(model.network())
    p0 = jax.tree.unflatten(jax.tree.structure(params), jax.tree.leaves(model.theta0.value))
    return eqx.combine(p0, static)


@eqx.filter_jit
def _pullback(params, static, tokens, positions, c):
    """J(theta)^T c for one cotangent c (L, V) of the logits."""
    _, vjp = jax.vjp(lambda p: eqx.combine(p, static)(tokens, positions), params)
    return vjp(c)[0]


def adjoint_products(net: Transformer, d, tokens, positions=None, n: int = 16):
    """Cotangents c (n, L, V) and <J(theta)^T c_k, d> (n,) for the logits of `net`: reverse
    mode, one (unbatched) vjp per cotangent, no jvp. (`jax.jacrev`, a vmapped vjp, is not used:
    compiled by this XLA:CPU build it gives wrong rows past the first few positions of this
    model; uncompiled, and one cotangent at a time, it agrees with finite differences.)"""
    params, static = params_of(net)
    cs = jax.random.normal(jax.random.PRNGKey(99), (n, *run(net, tokens, positions).shape))
    dots = []
    for c in cs:
        g = _pullback(params, static, tokens, positions, c)
        dots.append(
            sum(
                np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64))
                for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(d), strict=True)
            )
        )
    return np.asarray(cs, np.float64), np.asarray(dots)


def assert_first_order(out, f0, net0, d, tokens, positions=None, rtol=2e-5):
    """<c_k, out - f0> = <J^T c_k, d> for random cotangents: out - f0 is J d."""
    cs, expected = adjoint_products(net0, d, tokens, positions)
    actual = np.einsum("klv,lv->k", cs, np.asarray(out, np.float64) - np.asarray(f0, np.float64))
    scale = np.abs(expected).max()
    assert scale > 0.1
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale * 10)


TOKENS = jax.random.randint(jax.random.PRNGKey(7), (L,), 0, V)


def test_lazy_model_is_the_taylor_expansion_around_init():
    """f_lin(theta_0) = f(theta_0); f_lin(theta_0 + d) = f(theta_0) + J d (J by reverse mode)
    to float tolerance, and exactly linear in d: f_lin(theta_0 + 2d) - f_0 = 2 (f_lin(theta_0 + d)
    - f_0), while the network itself is not."""
    cfg = lazy_trial()
    lazy = make_model(cfg)
    assert isinstance(lazy, LazyTransformer) and lazy.config.attention == "reference"
    net0 = plain(lazy)
    f0 = np.asarray(run(net0, TOKENS), np.float64)
    np.testing.assert_allclose(run(lazy, TOKENS), f0, rtol=0, atol=2e-6)
    there, d = moved(lazy, 0.05)
    out = np.asarray(run(there, TOKENS), np.float64)
    assert np.abs(out - f0).max() > 0.05  # the move is visible
    assert_first_order(out, f0, net0, d, TOKENS)
    twice, _ = moved(lazy, 0.1)  # same seed: d doubled
    np.testing.assert_allclose(
        np.asarray(run(twice, TOKENS)) - f0, 2 * (np.asarray(run(there, TOKENS)) - f0), atol=1e-5
    )
    rich_there = moved(net0, 0.05)[0]
    gap = np.abs(np.asarray(run(rich_there, TOKENS)) - np.asarray(run(there, TOKENS))).max()
    assert gap > 1e-3  # second-order terms: the twin is not the network


@pytest.mark.slow
def test_lazy_model_under_a_scaling_is_the_expansion_of_the_scaled_network():
    """with_scaling and with_temperature reach both terms: the scaled twin equals
    f_s(theta_0) + J_s(theta_0) d of the scaled network, not the unscaled expansion."""
    lazy = make_model(lazy_trial())
    there, d = moved(lazy, 0.05)
    tokens = jax.random.randint(jax.random.PRNGKey(8), (2 * L,), 0, V)
    for scaled, scale_net in (
        (
            with_scaling(there, "linear", 2.0, seq_len=2 * L),
            lambda n: with_scaling(n, "linear", 2.0, seq_len=2 * L),
        ),
        (with_temperature(there, 1.7), lambda n: with_temperature(n, 1.7)),
    ):
        assert isinstance(scaled, LazyTransformer)
        net_s = scale_net(plain(lazy))
        f0_s, out = np.asarray(run(net_s, tokens)), np.asarray(run(scaled, tokens))
        assert_first_order(out, f0_s, net_s, d, tokens)
        # and not the unscaled expansion: both the point and the direction move
        assert np.abs(np.asarray(run(there, tokens)) - out).max() > 1e-2
        with pytest.raises(AssertionError):
            assert_first_order(out, f0_s, plain(lazy), d, tokens)


def _central_difference(f, p, d, eps):
    plus = jax.tree.map(lambda a, b: a + eps * b, p, d)
    minus = jax.tree.map(lambda a, b: a - eps * b, p, d)
    return (np.asarray(f(plus), np.float64) - np.asarray(f(minus), np.float64)) / (2 * eps)


# every registered encoding; rope and alibi by default, the others -m slow
FD_KINDS = [
    k if k in ("rope", "alibi") else pytest.param(k, marks=pytest.mark.slow)
    for k in POSITIONS.names()
]


@pytest.mark.parametrize("kind", FD_KINDS)
def test_jvp_equals_central_finite_differences(kind):
    """For every registered encoding, the tangent the lazy forward uses (jax.jvp of the
    network on the reference path, encoding parameters included) equals central finite
    differences in float32 with Richardson extrapolation; a direction off by 10% fails."""
    lazy = make_model(lazy_trial(kind))
    net0 = plain(lazy)
    params, static = params_of(net0)
    positions = jnp.arange(L, dtype=jnp.int32) + 3
    f = jax.jit(lambda p: eqx.combine(p, static)(TOKENS, positions))
    _, d = moved(net0, 1.0, seed=11)
    _, tangent = jax.jvp(f, (params,), (d,))
    eps = 1e-2
    fd = 4 * _central_difference(f, params, d, eps / 2) - _central_difference(f, params, d, eps)
    fd = fd / 3
    tangent = np.asarray(tangent, np.float64)
    scale = np.abs(tangent).max()
    err = np.abs(tangent - fd).max() / scale
    assert err < 2e-3, (kind, err)
    assert np.abs(1.1 * tangent - fd).max() / scale > 2e-2
    # and the lazy model's output at theta_0 + d moves by exactly that tangent
    theta, rest = params_of(lazy)
    d_lazy = jax.tree.unflatten(jax.tree.structure(theta), jax.tree.leaves(d))
    there = eqx.combine(jax.tree.map(jnp.add, theta, d_lazy), rest)
    out = np.asarray(run(there, TOKENS, positions), np.float64) - np.asarray(
        run(net0, TOKENS, positions)
    )
    np.testing.assert_allclose(out, tangent, rtol=0, atol=2e-5 * scale)


def test_ntk_is_constant_and_equals_the_networks_initial_ntk():
    """Theta_lin(theta) = J(theta_0) J(theta_0)^T for any theta (here theta_0 + d, |d| large
    enough to move the network's own NTK by several percent), equal to the network's NTK at
    initialisation."""
    lazy = make_model(lazy_trial())
    probes = np.asarray(jax.random.randint(jax.random.PRNGKey(5), (4, L), 0, V))
    u = jax.random.normal(jax.random.PRNGKey(6), (V,))
    k_init = np.asarray(sequence_kernel(lazy, probes, probes, output=u))
    k_net = np.asarray(sequence_kernel(plain(lazy), probes, probes, output=u))
    there, _ = moved(lazy, 0.2)
    k_there = np.asarray(sequence_kernel(there, probes, probes, output=u))
    scale = np.abs(k_net).max()
    np.testing.assert_allclose(k_init, k_net, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(k_there, k_init, rtol=0, atol=1e-5 * scale)
    rich_there = moved(plain(lazy), 0.2)[0]
    k_rich = np.asarray(sequence_kernel(rich_there, probes, probes, output=u))
    assert np.abs(k_rich - k_net).max() / scale > 0.02


def test_lazy_config_checks_and_ids():
    """train.regime names its allowed values; lazy runs reference attention (auto resolves to
    it, blocked and cudnn are refused) and no cached decoding; a lazy id says so, the rich id
    is unchanged."""
    from rope_lab.config import TrialConfig
    from rope_lab.typed import ConfigError

    with pytest.raises(ConfigError, match=r"train\.regime.*'linear'.*rich, lazy"):
        validate(replace(TrialConfig(), **{"train.regime": "linear"}))
    for impl in ("blocked", "cudnn"):
        with pytest.raises(ConfigError, match=r"model\.attention.*train\.regime=lazy"):
            validate(replace(lazy_trial(), **{"model.attention": impl}))
    with pytest.raises(ConfigError, match=r"eval\.decode\.protocols"):
        validate(replace(lazy_trial(), **{"eval.decode.protocols": ("prefill_fixed",)}))
    assert TrialConfig().trial_id == "passkey-rope-w128-d2-L64-s0-2d33b89688"
    assert replace(TrialConfig(), **{"train.regime": "rich"}).trial_id == TrialConfig().trial_id
    lazy_id = replace(TrialConfig(), **{"train.regime": "lazy"}).trial_id
    assert lazy_id.startswith("passkey-rope-lazy-w128-d2-L64-s0-") and lazy_id[-10:] != "2d33b89688"
    rich = make_model(replace(lazy_trial(), **{"train.regime": "rich"}))
    assert isinstance(rich, Transformer) and not isinstance(rich, LazyTransformer)
    assert linearize(plain(make_model(lazy_trial()))).config.attention == "reference"


@pytest.mark.slow  # ~15 s a family
@pytest.mark.parametrize("family", MODELS.names())
def test_every_model_family_has_its_lazy_twin(family):
    """`linearize` works on any registered family's network (a subclass of its own class):
    f_lin(theta_0) = f(theta_0) and f_lin(theta_0 + d) - f(theta_0) = J d."""
    cfg = tiny_trial("none", width=32, depth=2, length=L, regime="lazy")
    cfg = dataclasses.replace(cfg, model=ModelConfig(width=32, depth=2, family=family))
    lazy = make_model(validate(replace(cfg, **{"eval.length_multipliers": (1.0, 2.0)})))
    assert isinstance(lazy, Linearized) and isinstance(lazy, lazy.base)
    net0 = plain(lazy)
    f0 = np.asarray(run(net0, TOKENS), np.float64)
    np.testing.assert_allclose(run(lazy, TOKENS), f0, rtol=0, atol=2e-6)
    there, d = moved(lazy, 0.05)
    assert_first_order(np.asarray(run(there, TOKENS), np.float64), f0, net0, d, TOKENS)

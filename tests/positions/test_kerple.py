"""KERPLE-log: bias(i, j) = -r1_h log(1 + r2_h |p_i - p_j|) (Chi et al. 2022, eq. 12).

Every expected value is an independent NumPy (float64) transcription of the paper's formula.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.flatten_util import ravel_pytree

from rope_lab.config import ConfigError, TrialConfig, from_dict, replace, to_dict, validate
from rope_lab.model import count_params, trainable
from rope_lab.ntk import sequence_kernel
from rope_lab.positions import NoPE
from rope_lab.positions.kerple import KerpleLog, KerpleLogConfig, inverse_softplus
from rope_lab.train import make_model, train
from tests.helpers import tiny_trial

EPS = float(np.finfo(np.float32).eps)


def kerple_bias(r1: np.ndarray, r2: np.ndarray, q_pos, k_pos) -> np.ndarray:
    """(H, Lq, Lk) float64: -r1_h * ln(1 + r2_h * |q_i - k_j|)."""
    d = np.abs(np.asarray(q_pos, np.float64)[:, None] - np.asarray(k_pos, np.float64)[None, :])
    return -np.asarray(r1)[:, None, None] * np.log(1.0 + np.asarray(r2)[:, None, None] * d)


def encoding(r1: list[float], r2: list[float]) -> KerpleLog:
    """A KERPLE-log module with per-head r1, r2 set directly."""
    enc = KerpleLog(len(r1), 1.0, 1.0)
    raw = [jnp.asarray([inverse_softplus(v) for v in vals], jnp.float32) for vals in (r1, r2)]
    return eqx.tree_at(lambda e: (e.raw_r1, e.raw_r2), enc, raw)


positives = st.floats(0.05, 4.0)


@settings(max_examples=40, deadline=None)
@given(
    r=st.lists(st.tuples(positives, positives), min_size=1, max_size=4),
    offset=st.integers(0, 5000),
    gaps=st.lists(st.integers(1, 40), min_size=6, max_size=6),
)
def test_bias_is_the_paper_formula(r, offset, gaps):
    r1, r2 = [a for a, _ in r], [b for _, b in r]
    pos = offset + np.concatenate([[0], np.cumsum(gaps)])
    got = np.asarray(encoding(r1, r2).bias(jnp.asarray(pos), jnp.asarray(pos)), np.float64)
    want = kerple_bias(np.float32(r1), np.float32(r2), pos, pos)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(np.diagonal(got, axis1=1, axis2=2) == 0)
    assert np.all(got <= 0)


@settings(max_examples=25, deadline=None)
@given(shift=st.integers(1, 10**6), start=st.integers(0, 9), stop=st.integers(10, 16))
def test_bias_depends_on_distance_only_and_blocks_match_the_whole(shift, start, stop):
    enc = encoding([0.3, 1.7], [2.0, 0.4])
    pos = jnp.arange(16, dtype=jnp.int32)
    whole = np.asarray(enc.bias(pos, pos))
    shifted = np.asarray(enc.bias(pos + shift, pos + shift))
    np.testing.assert_array_equal(whole, shifted)
    block = np.asarray(enc.bias(pos[start:stop], pos[:stop]))
    np.testing.assert_array_equal(block, whole[:, start:stop, :stop])


def test_model_logits_are_nope_logits_plus_the_bias():
    """First-layer logits of a KERPLE model minus those of the same weights without position
    information equal the formula, at offset positions."""
    model = make_model(tiny_trial("kerple_log", width=32, head_dim=8))
    model = eqx.tree_at(lambda m: m.position, model, encoding([0.5, 1.0, 2.0, 3.0], [1, 2, 3, 4]))
    nope = eqx.tree_at(lambda m: m.position, model, NoPE())
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) * 3 + 100
    diff = np.asarray(model.attention_logits(tokens, pos), np.float64) - np.asarray(
        nope.attention_logits(tokens, pos), np.float64
    )
    want = kerple_bias(np.float32([0.5, 1.0, 2.0, 3.0]), np.float32([1, 2, 3, 4]), pos, pos)
    np.testing.assert_allclose(diff, want, rtol=1e-5, atol=1e-4)


def test_config_fields_validation_and_parameter_count():
    cfg = from_dict(
        TrialConfig,
        {"model": {"position": {"kind": "kerple_log", "kerple_log": {"r1_init": 0.5}}}},
    )
    assert cfg.model.position.options == KerpleLogConfig(r1_init=0.5, r2_init=1.0)
    assert to_dict(cfg)["model"]["position"]["kerple_log"] == {"r1_init": 0.5, "r2_init": 1.0}
    with pytest.raises(ConfigError, match=r"model.position.kerple_log.r3: unknown key 'r3'"):
        from_dict(
            TrialConfig, {"model": {"position": {"kind": "kerple_log", "kerple_log": {"r3": 1}}}}
        )
    tiny = tiny_trial("kerple_log")
    with pytest.raises(ConfigError, match=r"model.position.kerple_log.r2_init: must be > 0"):
        validate(replace(tiny, **{"model.position.kerple_log.r2_init": 0.0}))
    model = make_model(validate(tiny))
    nope = make_model(tiny_trial("none"))
    n_heads = tiny.model.n_heads
    assert count_params(model) - count_params(nope) == 2 * n_heads
    assert KerpleLogConfig().n_params(tiny.model, max_length=1) == 2 * n_heads
    np.testing.assert_allclose(jax.nn.softplus(model.position.raw_r1), 1.0, rtol=1e-6)


def test_training_moves_r1_and_r2_and_keeps_them_positive():
    cfg = tiny_trial("kerple_log", steps=20)
    start = make_model(cfg)
    trained = train(cfg).model
    for name in ("raw_r1", "raw_r2"):
        before, after = getattr(start.position, name), getattr(trained.position, name)
        assert np.all(np.asarray(after) != np.asarray(before))
        assert np.all(np.asarray(jax.nn.softplus(after)) > 0)


def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a KERPLE model equals the brute-force kernel from jax.jacrev over all
    parameters, KERPLE's r1 and r2 included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("kerple_log", width=16, head_dim=8, vocab=11))
    model = eqx.tree_at(lambda m: m.position, model, encoding([0.7, 1.3], [0.5, 2.0]))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    params, static = eqx.partition(model, trainable(model))
    flat, unravel = ravel_pytree(params)

    def logits(theta, tok):
        return eqx.combine(unravel(theta), static)(tok)

    with jax.default_matmul_precision("highest"):
        jac = jax.vmap(jax.jacrev(logits), in_axes=(None, 0))(flat, jnp.asarray(tokens))
    jac = np.asarray(jac, np.float64)  # (N, L, V, P)
    per_seq = jac.sum(1) / np.sqrt(11)  # (N, V, P)
    want = np.einsum("ncp,mcp->nm", per_seq, per_seq)
    got = np.asarray(sequence_kernel(model, tokens, tokens, output="trace"), np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6 * np.abs(want).max())
    is_r = jax.tree.map(jnp.zeros_like, params)
    is_r = eqx.tree_at(lambda p: (p.position.raw_r1, p.position.raw_r2), is_r, [jnp.ones(2)] * 2)
    sel = np.asarray(ravel_pytree(is_r)[0]) == 1
    r_part = np.einsum("ncp,mcp->nm", per_seq[..., sel], per_seq[..., sel])
    assert sel.sum() == 4  # without KERPLE's parameters the same check would fail:
    assert not np.allclose(got, want - r_part, rtol=2e-4, atol=1e-6 * np.abs(want).max())

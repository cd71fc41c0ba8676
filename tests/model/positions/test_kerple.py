"""KERPLE (Chi et al. 2022): the log variant, bias(i, j) = -r1_h log(1 + r2_h |p_i - p_j|)
(eq. 12), and the power variant, bias(i, j) = -r1_h |p_i - p_j| ** r2_h with 0 < r2_h <= 2.

Every expected value is an independent NumPy (float64) transcription of the paper's formula.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, TrialConfig, from_dict, replace, to_dict, validate
from rope_lab.model.positions.kerple import (
    KerpleLogConfig,
    KerplePowerConfig,
    inverse_double_sigmoid,
    inverse_softplus,
)
from rope_lab.model.positions.modules import NoPE
from rope_lab.model.positions.modules.kerple import KerpleLog, KerplePower
from rope_lab.model.transformer import count_params
from rope_lab.trial.train import make_model, train
from tests.helpers import ntk_against_jacrev, tiny_trial

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


@pytest.mark.slow  # ~25 s, beside tests/ntk/test_kernels.py::test_matches_bruteforce
def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a KERPLE model equals the brute-force kernel from jax.jacrev over all
    parameters, KERPLE's r1 and r2 included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("kerple_log", width=16, head_dim=8, vocab=11))
    model = eqx.tree_at(lambda m: m.position, model, encoding([0.7, 1.3], [0.5, 2.0]))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    _, own, _ = ntk_against_jacrev(model, tokens, lambda p: (p.position.raw_r1, p.position.raw_r2))
    assert own.sum() == 4


# KERPLE-power


def power_bias(r1: np.ndarray, r2: np.ndarray, q_pos, k_pos) -> np.ndarray:
    """(H, Lq, Lk) float64: -r1_h * |q_i - k_j| ** r2_h."""
    d = np.abs(np.asarray(q_pos, np.float64)[:, None] - np.asarray(k_pos, np.float64)[None, :])
    return (
        -np.asarray(r1, np.float64)[:, None, None] * d ** np.asarray(r2, np.float64)[:, None, None]
    )


def power_encoding(r1: list[float], r2: list[float]) -> KerplePower:
    """A KERPLE-power module with per-head r1, r2 set directly."""
    enc = KerplePower(len(r1), 1.0, 1.0)
    raw_r1 = jnp.asarray([inverse_softplus(v) for v in r1], jnp.float32)
    raw_r2 = jnp.asarray([inverse_double_sigmoid(v) for v in r2], jnp.float32)
    return eqx.tree_at(lambda e: (e.raw_r1, e.raw_r2), enc, [raw_r1, raw_r2])


def power_r2(enc: KerplePower) -> np.ndarray:
    """The module's r2 (H,), recomputed in float64 from its raw values: 2 / (1 + e^-raw)."""
    return 2.0 / (1.0 + np.exp(-np.asarray(enc.raw_r2, np.float64)))


def test_power_parametrisation_inverts():
    for r2 in (0.01, 0.5, 1.0, 1.5, 1.99):
        assert 2.0 / (1.0 + np.exp(-inverse_double_sigmoid(r2))) == pytest.approx(r2, rel=1e-12)
    np.testing.assert_allclose(power_r2(KerplePower(3, 1.0, 1.7)), 1.7, rtol=1e-6)


@settings(max_examples=20, deadline=None)
@given(
    r=st.lists(st.tuples(positives, st.floats(0.05, 1.95)), min_size=1, max_size=4),
    offset=st.integers(0, 5000),
    gaps=st.lists(st.integers(1, 40), min_size=6, max_size=6),
)
def test_power_bias_is_the_paper_formula(r, offset, gaps):
    r1, r2 = [a for a, _ in r], [b for _, b in r]
    pos = offset + np.concatenate([[0], np.cumsum(gaps)])
    keys = pos[::-1]  # keys both before and after each query
    got = np.asarray(power_encoding(r1, r2).bias(jnp.asarray(pos), jnp.asarray(keys)), np.float64)
    want = power_bias(np.float32(r1), np.float32(r2), pos, keys)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    square = np.asarray(power_encoding(r1, r2).bias(jnp.asarray(pos), jnp.asarray(pos)))
    assert np.all(np.diagonal(square, axis1=1, axis2=2) == 0)
    assert np.all(square <= 0) and np.all(np.isfinite(got))
    for i in range(len(pos)):  # farther keys (smaller j <= i) are penalised at least as much
        assert np.all(np.diff(square[:, i, : i + 1], axis=-1) >= 0)


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(1, 10**6), start=st.integers(0, 9), stop=st.integers(10, 16))
def test_power_bias_depends_on_distance_only_and_blocks_match_the_whole(shift, start, stop):
    enc = power_encoding([0.3, 1.7], [1.9, 0.4])
    pos = jnp.arange(16, dtype=jnp.int32)
    whole = np.asarray(enc.bias(pos, pos))
    shifted = np.asarray(enc.bias(pos + shift, pos + shift))
    np.testing.assert_array_equal(whole, shifted)
    block = np.asarray(enc.bias(pos[start:stop], pos[:stop]))
    np.testing.assert_array_equal(block, whole[:, start:stop, :stop])


def test_power_model_logits_are_nope_logits_plus_the_bias():
    """First-layer logits of a KERPLE-power model minus those of the same weights without
    position information equal the formula, at offset positions."""
    model = make_model(tiny_trial("kerple_power", width=32, head_dim=8))
    r1, r2 = [0.5, 1.0, 2.0, 0.1], [0.3, 1.0, 1.5, 1.9]
    model = eqx.tree_at(lambda m: m.position, model, power_encoding(r1, r2))
    nope = eqx.tree_at(lambda m: m.position, model, NoPE())
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) * 3 + 100
    diff = np.asarray(model.attention_logits(tokens, pos), np.float64) - np.asarray(
        nope.attention_logits(tokens, pos), np.float64
    )
    want = power_bias(np.float32(r1), np.float32(r2), pos, pos)
    np.testing.assert_allclose(diff, want, rtol=1e-5, atol=1e-4)


def test_power_config_fields_validation_and_parameter_count():
    cfg = from_dict(
        TrialConfig,
        {"model": {"position": {"kind": "kerple_power", "kerple_power": {"r2_init": 1.5}}}},
    )
    assert cfg.model.position.options == KerplePowerConfig(r1_init=1.0, r2_init=1.5)
    assert to_dict(cfg)["model"]["position"]["kerple_power"] == {"r1_init": 1.0, "r2_init": 1.5}
    with pytest.raises(ConfigError, match=r"model.position.kerple_power.r3: unknown key 'r3'"):
        from_dict(
            TrialConfig,
            {"model": {"position": {"kind": "kerple_power", "kerple_power": {"r3": 1}}}},
        )
    tiny = tiny_trial("kerple_power")
    path = "model.position.kerple_power"
    for name, value, message in [
        ("r1_init", 0.0, r"r1_init: must be > 0, got 0.0"),
        ("r1_init", -1.0, r"r1_init: must be > 0, got -1.0"),
        ("r2_init", 0.0, r"r2_init: must be in \(0, 2\), got 0.0 \(strictly below 2: .*sigmoid"),
        ("r2_init", 2.0, r"r2_init: must be in \(0, 2\), got 2.0 \(strictly below 2"),
        ("r2_init", 2.5, r"r2_init: must be in \(0, 2\), got 2.5"),
    ]:
        with pytest.raises(ConfigError, match=rf"{path}.{message}"):
            validate(replace(tiny, **{f"{path}.{name}": value}))
    validate(replace(tiny, **{f"{path}.r2_init": 1.999}))
    model = make_model(validate(tiny))
    nope = make_model(tiny_trial("none"))
    n_heads = tiny.model.n_heads
    assert count_params(model) - count_params(nope) == 2 * n_heads
    assert KerplePowerConfig().n_params(tiny.model, max_length=1) == 2 * n_heads
    np.testing.assert_allclose(jax.nn.softplus(model.position.raw_r1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(power_r2(model.position), 1.0, rtol=1e-6)


@pytest.mark.slow  # a short training run; the formula and NTK tests pin the numbers
def test_power_training_moves_r1_and_r2_and_keeps_r2_in_range():
    cfg = replace(
        tiny_trial("kerple_power", steps=20), **{"model.position.kerple_power.r2_init": 1.9}
    )
    start = make_model(cfg)
    trained = train(cfg).model
    for name in ("raw_r1", "raw_r2"):
        before, after = getattr(start.position, name), getattr(trained.position, name)
        assert np.all(np.asarray(after) != np.asarray(before))
    assert np.all(np.asarray(jax.nn.softplus(trained.position.raw_r1)) > 0)
    r2 = np.asarray(2.0 * jax.nn.sigmoid(trained.position.raw_r2))
    assert np.all((r2 > 0) & (r2 <= 2))


def test_power_gradient_is_finite_at_distance_zero():
    """d/dr2 of |d| ** r2 is |d| ** r2 log |d|: at d = 0 (the diagonal) a naive exp(r2 log d)
    gives nan; the module's gradients are finite, including keys after the query."""
    enc = power_encoding([0.7, 1.3], [0.5, 1.5])
    pos = jnp.asarray([4, 4, 5, 9, 9, 30], jnp.int32)  # repeated positions: d = 0 off the diagonal

    def total(e):
        return jnp.sum(e.bias(pos, pos[::-1]) ** 2)

    grads = eqx.filter_grad(total)(enc)
    for g in (grads.raw_r1, grads.raw_r2):
        assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g) != 0)
    jac = jax.jacrev(lambda raw: eqx.tree_at(lambda e: e.raw_r2, enc, raw).bias(pos, pos))(
        enc.raw_r2
    )
    assert np.all(np.isfinite(np.asarray(jac)))

    def naive(raw_r2):  # the hazard the module avoids
        d = jnp.abs(pos[:, None] - pos[None]).astype(jnp.float32)
        return jnp.sum(jnp.exp(2 * jax.nn.sigmoid(raw_r2)[:, None, None] * jnp.log(d)[None]))

    assert not np.all(np.isfinite(np.asarray(jax.grad(naive)(enc.raw_r2))))


@pytest.mark.slow  # ~22 s, beside tests/ntk/test_kernels.py::test_matches_bruteforce
def test_power_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a KERPLE-power model equals the brute-force kernel from jax.jacrev
    over all parameters, r1 and r2 included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("kerple_power", width=16, head_dim=8, vocab=11))
    model = eqx.tree_at(lambda m: m.position, model, power_encoding([0.2, 0.6], [0.5, 1.2]))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    per_seq, own, _ = ntk_against_jacrev(
        model, tokens, lambda p: (p.position.raw_r1, p.position.raw_r2)
    )
    assert np.all(np.isfinite(per_seq))
    assert own.sum() == 4

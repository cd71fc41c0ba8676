"""xPos (Sun et al. 2022): RoPE's rotation times zeta_i^(n / B) on the query at position n and
zeta_i^(-m / B) on the key at m, zeta_i = (2i / R + gamma) / (1 + gamma), R the rotary dims.

Every expected value is an independent NumPy (float64) transcription of the paper's formula,
written with complex numbers: rotation pair i of a head is z_i = x_i + 1j x_{i + R/2}.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model.positions.modules.rotary import RotaryPE
from rope_lab.model.positions.modules.xpos import XPosPE
from rope_lab.model.positions.xpos import XPosConfig
from rope_lab.model.transformer import with_scaling
from rope_lab.ntk.kernels import sequence_kernel
from rope_lab.trial.train import make_model
from tests.helpers import ntk_against_jacrev, tiny_trial


def paper_rotate(x, positions, theta, gamma, base, *, key):
    """x (L, H, D), R = D: z_i e^{j n theta^(-2i/R)} zeta_i^(+-n / base) in float64."""
    x = np.asarray(x, np.float64)
    r = x.shape[-1]
    half = r // 2
    i = np.arange(half)
    freq = theta ** (-2.0 * i / r)
    zeta = (2.0 * i / r + gamma) / (1.0 + gamma)
    n = np.asarray(positions, np.float64)[:, None, None]
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * n * freq)
    z = z * zeta ** ((-n if key else n) / base)
    return np.concatenate([z.real, z.imag], axis=-1)


def xpos_encoding(head_dim, *, theta=10000.0, gamma=0.4, base=64.0):
    cfg = XPosConfig(theta=theta, gamma=gamma, scale_base=base)
    model_cfg = tiny_trial("xpos", head_dim=head_dim).model
    return cfg.build(model_cfg, max_length=64, train_length=16, key=jax.random.PRNGKey(0))


@settings(max_examples=15, deadline=None)
@given(
    offset=st.integers(0, 3000),
    gamma=st.floats(0.1, 2.0),
    base=st.floats(256.0, 2048.0),
    seed=st.integers(0, 100),
)
def test_rotation_and_decay_are_the_paper_formula(offset, gamma, base, seed):
    enc = xpos_encoding(8, gamma=gamma, base=base)
    q, k = jax.random.normal(jax.random.PRNGKey(seed), (2, 7, 2, 8))
    pos = offset + np.arange(7) * 3
    got_q, got_k = enc.rotate(q, k, jnp.asarray(pos, jnp.int32))
    want_q = paper_rotate(q, pos, 10000.0, gamma, base, key=False)
    want_k = paper_rotate(k, pos, 10000.0, gamma, base, key=True)
    for got, want in ((got_q, want_q), (got_k, want_k)):
        # float32 angles n theta_i are off by ~n eps: errors scale with each pair's magnitude
        size = np.hypot(want[..., :4], want[..., 4:])
        size = np.concatenate([size, size], axis=-1)
        assert np.all(np.abs(np.asarray(got, np.float64) - want) <= 1e-5 + 1e-3 * size)


@settings(max_examples=15, deadline=None)
@given(shift=st.integers(1, 2000), seed=st.integers(0, 100))
def test_logits_depend_on_the_distance_only(shift, seed):
    """q_n . k_m is unchanged when every position moves by the same offset."""
    enc = xpos_encoding(8, base=512.0)
    q, k = jax.random.normal(jax.random.PRNGKey(seed), (2, 9, 1, 8))
    pos = jnp.arange(9, dtype=jnp.int32) * 2
    logits = [
        np.einsum("qhd,khd->hqk", *map(np.asarray, enc.rotate(q, k, p)), dtype=np.float64)
        for p in (pos, pos + shift)
    ]
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-4 * np.abs(logits[0]).max())


def test_decay_per_pair_is_zeta_to_the_distance():
    """A query and key on rotation pair i only: logit(n, m) = zeta_i^((n - m) / B) cos((n - m)
    theta_i); the slowest pair decays least (zeta grows with i)."""
    r, base = 8, 32.0
    enc = xpos_encoding(r, base=base)
    zeta = (2.0 * np.arange(r // 2) / r + 0.4) / 1.4
    freq = 10000.0 ** (-2.0 * np.arange(r // 2) / r)
    pos = jnp.arange(40, dtype=jnp.int32)
    for i in range(r // 2):
        unit = np.zeros((40, 1, r), np.float32)
        unit[:, :, i] = 1.0
        rq, rk = enc.rotate(jnp.asarray(unit), jnp.asarray(unit), pos)
        got = np.asarray(rq[-1, 0]) @ np.asarray(rk[:, 0]).T  # query at 39, keys 0..39
        dist = 39 - np.arange(40)
        np.testing.assert_allclose(
            got, zeta[i] ** (dist / base) * np.cos(dist * freq[i]), rtol=1e-4, atol=1e-5
        )


def test_model_without_decay_is_rope():
    """gamma -> infinity makes every zeta 1: the model equals RoPE with the same weights."""
    cfg = validate(tiny_trial("xpos", width=16, head_dim=8))
    model = make_model(cfg)
    rope = eqx.tree_at(lambda m: m.position, model, RotaryPE(model.position.inv_freq.value, 1.0))
    flat = eqx.tree_at(lambda m: m.position.zeta.value, model, jnp.ones(4))
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) + 50
    np.testing.assert_allclose(flat(tokens, pos), rope(tokens, pos), rtol=1e-5, atol=1e-5)
    assert not np.allclose(model(tokens, pos), rope(tokens, pos), atol=1e-4)


def test_every_scaling_acts_on_its_frequencies_and_keeps_the_decay():
    model = make_model(validate(tiny_trial("xpos", width=16, head_dim=8)))
    scaled = with_scaling(model, "linear", 4.0)
    assert isinstance(scaled.position, XPosPE)
    np.testing.assert_allclose(scaled.position.inv_freq.value, model.position.inv_freq.value / 4)
    np.testing.assert_array_equal(scaled.position.zeta.value, model.position.zeta.value)
    yarn = with_scaling(model, "yarn", 4.0)
    assert float(yarn.position.attention_factor.value) > 1.0


@pytest.mark.slow  # ~25 s, beside tests/ntk/test_kernels.py::test_matches_bruteforce
def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of an xPos model equals the jacrev kernel; the decay changes it."""
    tiny = tiny_trial("xpos", width=16, head_dim=8, vocab=14)
    model = make_model(validate(replace(tiny, **{"model.position.xpos.scale_base": 4.0})))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 14))
    ntk_against_jacrev(model, tokens, lambda p: p.blocks.attn.k.weight)
    rope = eqx.tree_at(lambda m: m.position, model, RotaryPE(model.position.inv_freq.value, 1.0))
    xpos_k = np.asarray(sequence_kernel(model, tokens, tokens, output="trace"))
    rope_k = np.asarray(sequence_kernel(rope, tokens, tokens, output="trace"))
    assert not np.allclose(xpos_k, rope_k, rtol=1e-3)


def test_config_fields_and_validation():
    tiny = tiny_trial("xpos")
    assert validate(tiny).model.position.options == XPosConfig()
    path, longest = "model.position.xpos", validate(tiny).max_length
    for name, value, message in [
        ("gamma", 0.0, r"gamma: must be > 0"),
        ("scale_base", -1.0, r"scale_base: must be > 0"),
        ("scale_base", 0.2, rf"scale_base: positions up to {longest} are used, but the decay"),
    ]:
        with pytest.raises(ConfigError, match=rf"{path}.{message}"):
            validate(replace(tiny, **{f"{path}.{name}": value}))
    with pytest.raises(ConfigError, match=r"eval.methods\[0\]"):
        validate(replace(tiny, **{"eval.methods": ("nope",)}))
    limit = XPosConfig().max_length_float32(8)
    zeta_min = 0.4 / 1.4
    assert zeta_min ** (-limit / 512.0) < np.finfo(np.float32).max
    assert zeta_min ** (-limit / 512.0) > np.finfo(np.float32).max ** 0.8

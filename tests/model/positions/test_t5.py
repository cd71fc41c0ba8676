"""T5 relative bias: bias(i, j) = table[h, bucket(max(p_i - p_j, 0))] (Raffel et al. 2020, 2.1).

The causal bucket (T5 / Mesh-TensorFlow's `_relative_position_bucket`, unidirectional) of a
distance n, with m = num_buckets // 2: n itself for n < m, else
min(m + floor(log(n / m) / log(max_distance / m) * (num_buckets - m)), num_buckets - 1).
Every expected bucket is an independent transcription of that formula, the floor taken exactly
with Python fractions; expected biases index the table with it in NumPy.
"""

import math
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, TrialConfig, from_dict, replace, to_dict, validate
from rope_lab.model.positions.modules import NoPE
from rope_lab.model.positions.modules.t5 import T5Bias
from rope_lab.model.positions.t5 import T5BiasConfig
from rope_lab.model.transformer import count_params
from rope_lab.trial.train import make_model, train
from tests.helpers import ntk_against_jacrev, tiny_trial


def t5_bucket(n: int, num_buckets: int, max_distance: int) -> int:
    """The causal T5 bucket of a relative distance n (query minus key position)."""
    n = max(n, 0)
    m = num_buckets // 2
    if n < m:
        return n
    span = num_buckets - m
    # floor(log(n / m) / log(max_distance / m) * span) = the largest k with
    # (max_distance / m) ** k <= (n / m) ** span; k = span is already past the last bucket.
    k = 0
    while k < span and Fraction(max_distance, m) ** (k + 1) <= Fraction(n, m) ** span:
        k += 1
    return min(m + k, num_buckets - 1)


def float_bucket(n: int, num_buckets: int, max_distance: int) -> tuple[int, float]:
    """The textbook float64 formula, and how far its log quotient is from an integer."""
    m = num_buckets // 2
    if n < m:
        return n, 1.0
    y = math.log(n / m) / math.log(max_distance / m) * (num_buckets - m)
    return min(m + math.floor(y), num_buckets - 1), abs(y - round(y))


def t5_bias(table: np.ndarray, num_buckets: int, max_distance: int, q_pos, k_pos) -> np.ndarray:
    """(H, Lq, Lk): table[h, bucket(q_i - k_j)]."""
    rel = [[int(q) - int(k) for k in k_pos] for q in q_pos]
    buckets = np.asarray([[t5_bucket(r, num_buckets, max_distance) for r in row] for row in rel])
    return np.asarray(table)[:, buckets]


def module_buckets(distances, num_buckets: int, max_distance: int) -> np.ndarray:
    """The module's bucket of each distance (queries at the distances, one key at 0)."""
    enc = T5Bias(1, num_buckets, max_distance)
    q = jnp.asarray(distances, jnp.int32)
    return np.asarray(enc.buckets(q, jnp.zeros(1, jnp.int32)))[:, 0]


def encoding(table: np.ndarray, max_distance: int = 128) -> T5Bias:
    """A T5-bias module with its (H, num_buckets) table set directly."""
    heads, num_buckets = np.shape(table)
    enc = T5Bias(heads, num_buckets, max_distance)
    return eqx.tree_at(lambda e: e.table, enc, jnp.asarray(table, jnp.float32))


def random_table(heads: int, num_buckets: int = 32, seed: int = 0) -> np.ndarray:
    """(heads, num_buckets) float32 normal draws."""
    return np.random.default_rng(seed).normal(size=(heads, num_buckets)).astype(np.float32)


# Hand-computed with num_buckets 32, max_distance 128: m = 16, so for n >= 16 the bucket is
# 16 + floor(log2(n / 16) / 3 * 16) (log(128 / 16) = log 8 = 3 log 2):
#   n = 18:  log2(1.125)  = 0.1699 -> * 16 / 3 = 0.906  -> 16
#   n = 19:  log2(1.1875) = 0.2479 -> 1.322 -> 17
#   n = 20:  log2(1.25)   = 0.3219 -> 1.717 -> 17
#   n = 24:  log2(1.5)    = 0.5850 -> 3.120 -> 19
#   n = 32:  log2(2)      = 1      -> 5.333 -> 21
#   n = 64:  log2(4)      = 2      -> 10.67 -> 26
#   n = 100: log2(6.25)   = 2.6439 -> 14.10 -> 30
#   n = 127: log2(7.9375) = 2.9887 -> 15.94 -> 31
#   n = 128: log2(8)      = 3      -> 16    -> 32, clipped to 31 (as is every larger n)
DEFAULT_KNOWN = {
    **{n: n for n in range(16)},
    16: 16,
    18: 16,
    19: 17,
    20: 17,
    24: 19,
    32: 21,
    64: 26,
    100: 30,
    127: 31,
    128: 31,
    10**6: 31,
}
# Distances where the log quotient is an integer exactly (floating-point logs can miss these):
#   (17 buckets, 27): m = 8, n = 12: log(1.5) / log(3.375) * 9 = (1 / 3) * 9 = 3 -> 11
#   (9 buckets, 128): m = 4, n = 8: log(2) / log(32) * 5 = 1 -> 5; n = 16: 2 -> 6; n = 64: 4 -> 8
#   (9 buckets, 128): n = 7: log(1.75) / log(32) * 5 = 0.807 -> 4
BOUNDARY_KNOWN = [
    (17, 27, 12, 11),
    (9, 128, 8, 5),
    (9, 128, 16, 6),
    (9, 128, 64, 8),
    (9, 128, 7, 4),
]


def test_buckets_match_hand_computed_values():
    ns = sorted(DEFAULT_KNOWN)
    assert [t5_bucket(n, 32, 128) for n in ns] == [DEFAULT_KNOWN[n] for n in ns]
    np.testing.assert_array_equal(module_buckets(ns, 32, 128), [DEFAULT_KNOWN[n] for n in ns])
    for num_buckets, max_distance, n, want in BOUNDARY_KNOWN:
        assert t5_bucket(n, num_buckets, max_distance) == want
        assert module_buckets([n], num_buckets, max_distance)[0] == want
    assert t5_bucket(-5, 32, 128) == 0  # a key after the query: distance max(-5, 0) = 0


@settings(max_examples=30, deadline=None)
@given(
    num_buckets=st.integers(2, 64),
    extra=st.integers(1, 3000),
    distances=st.lists(st.integers(-50, 10**5), min_size=1, max_size=40),
)
@example(num_buckets=17, extra=27 - 8, distances=[11, 12, 13])
@example(num_buckets=9, extra=128 - 4, distances=[7, 8, 16, 64])
def test_module_buckets_are_the_formula(num_buckets, extra, distances):
    max_distance = num_buckets // 2 + extra
    m = num_buckets // 2
    near = [m - 1, m, m + 1, max_distance - 1, max_distance, max_distance + 1]
    distances = [*distances, *(n for n in near if n >= 0)]
    want = [t5_bucket(n, num_buckets, max_distance) for n in distances]
    np.testing.assert_array_equal(module_buckets(distances, num_buckets, max_distance), want)
    for n, bucket in zip(distances, want, strict=True):  # the exact floor is the textbook one
        textbook, gap = float_bucket(max(n, 0), num_buckets, max_distance)
        if gap > 1e-9:
            assert bucket == textbook
        assert 0 <= bucket < num_buckets
        if n >= max_distance:
            assert bucket == num_buckets - 1


@settings(max_examples=15, deadline=None)
@given(num_buckets=st.integers(2, 64), extra=st.integers(1, 600))
def test_buckets_are_non_decreasing_in_distance(num_buckets, extra):
    max_distance = num_buckets // 2 + extra
    got = module_buckets(np.arange(2000), num_buckets, max_distance)  # to > 3 max_distance
    assert np.all(np.diff(got) >= 0)  # (steps can skip buckets where the log spacing is < 1)
    np.testing.assert_array_equal(got[: num_buckets // 2], np.arange(num_buckets // 2))
    assert got[-1] == num_buckets - 1


@settings(max_examples=15, deadline=None)
@given(
    heads=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    offset=st.integers(0, 5000),
    gaps=st.lists(st.integers(1, 60), min_size=6, max_size=6),
)
def test_bias_is_the_table_at_the_bucket(heads, seed, offset, gaps):
    table = random_table(heads, 32, seed)
    pos = offset + np.concatenate([[0], np.cumsum(gaps)])
    keys = pos[::-1]  # keys both before and after each query (those after: bucket 0)
    got = np.asarray(encoding(table).bias(jnp.asarray(pos), jnp.asarray(keys)))
    assert got.shape == (heads, 7, 7) and got.dtype == np.float32
    np.testing.assert_array_equal(got, t5_bias(table, 32, 128, pos, keys))
    later = pos[:, None] < keys[None, :]
    np.testing.assert_array_equal(got[:, later], np.repeat(table[:, :1], later.sum(), axis=1))


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(1, 10**6), start=st.integers(0, 9), stop=st.integers(10, 16))
def test_bias_depends_on_distance_only_and_blocks_match_the_whole(shift, start, stop):
    enc = encoding(random_table(2, 8, seed=1), max_distance=10)
    pos = jnp.arange(16, dtype=jnp.int32) * 2
    whole = np.asarray(enc.bias(pos, pos))
    shifted = np.asarray(enc.bias(pos + shift, pos + shift))
    np.testing.assert_array_equal(whole, shifted)
    block = np.asarray(enc.bias(pos[start:stop], pos[:stop]))
    np.testing.assert_array_equal(block, whole[:, start:stop, :stop])


def test_model_logits_are_nope_logits_plus_the_bias():
    """First-layer logits of a T5-bias model minus those of the same weights without position
    information equal the table at the buckets, at offset positions."""
    model = make_model(tiny_trial("t5_bias", width=32, head_dim=8))
    table = random_table(4, 32, seed=2)
    model = eqx.tree_at(lambda m: m.position, model, encoding(table))
    nope = eqx.tree_at(lambda m: m.position, model, NoPE())
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) * 7 + 100  # distances 0..77: exact and log buckets
    diff = np.asarray(model.attention_logits(tokens, pos), np.float64) - np.asarray(
        nope.attention_logits(tokens, pos), np.float64
    )
    want = t5_bias(table, 32, 128, np.asarray(pos), np.asarray(pos))
    np.testing.assert_allclose(diff, want, rtol=1e-5, atol=1e-5)


def test_config_fields_validation_and_parameter_count():
    cfg = from_dict(
        TrialConfig,
        {"model": {"position": {"kind": "t5_bias", "t5_bias": {"num_buckets": 16}}}},
    )
    assert cfg.model.position.options == T5BiasConfig(num_buckets=16, max_distance=128)
    assert to_dict(cfg)["model"]["position"]["t5_bias"] == {"num_buckets": 16, "max_distance": 128}
    with pytest.raises(ConfigError, match=r"model.position.t5_bias.buckets: unknown key"):
        from_dict(
            TrialConfig, {"model": {"position": {"kind": "t5_bias", "t5_bias": {"buckets": 8}}}}
        )
    with pytest.raises(ConfigError, match=r"model.position.t5_bias.num_buckets: expected an int"):
        from_dict(
            TrialConfig,
            {"model": {"position": {"kind": "t5_bias", "t5_bias": {"num_buckets": 8.5}}}},
        )
    tiny = tiny_trial("t5_bias")
    path = "model.position.t5_bias"
    bad = [
        ({"num_buckets": 1}, r"num_buckets: must be an integer >= 2, got 1"),
        ({"num_buckets": 8.0}, r"num_buckets: must be an integer >= 2, got 8.0"),
        ({"num_buckets": True}, r"num_buckets: must be an integer >= 2, got True"),
        (
            {"num_buckets": 8, "max_distance": 4},
            r"max_distance: must be an integer > .* = 4, got 4",
        ),
        ({"max_distance": 100.0}, r"max_distance: must be an integer > .* = 16, got 100.0"),
    ]
    for changes, message in bad:
        with pytest.raises(ConfigError, match=rf"{path}.{message}"):
            validate(replace(tiny, **{f"{path}.{k}": v for k, v in changes.items()}))
    validate(replace(tiny, **{f"{path}.num_buckets": 8, f"{path}.max_distance": 5}))
    validate(replace(tiny, **{f"{path}.num_buckets": 2, f"{path}.max_distance": 2}))
    model = make_model(validate(tiny))
    nope = make_model(tiny_trial("none"))
    n_heads = tiny.model.n_heads
    assert count_params(model) - count_params(nope) == n_heads * 32
    assert T5BiasConfig().n_params(tiny.model, max_length=1) == n_heads * 32
    assert T5BiasConfig(num_buckets=8).n_params(tiny.model, max_length=1) == n_heads * 8
    assert model.position.table.shape == (n_heads, 32)
    assert np.all(np.asarray(model.position.table) == 0)  # zeros: the untrained model is NoPE's


@pytest.mark.slow  # a short training run; the formula and NTK tests pin the numbers
def test_training_moves_the_table_of_the_distances_it_sees():
    cfg = tiny_trial("t5_bias", steps=20)  # length 16: distances 0..15, buckets 0..15
    start = make_model(cfg)
    trained = np.asarray(train(cfg).model.position.table)
    assert np.all(trained[:, :16] != np.asarray(start.position.table)[:, :16])
    np.testing.assert_array_equal(trained[:, 16:], 0.0)  # buckets no training distance reaches


@pytest.mark.slow  # ~25 s, beside tests/ntk/test_kernels.py::test_matches_bruteforce
def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a T5-bias model equals the brute-force kernel from jax.jacrev over all
    parameters, the bias table included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("t5_bias", width=16, head_dim=8, vocab=11))
    model = eqx.tree_at(lambda m: m.position, model, encoding(random_table(2, 32, seed=3)))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    _, own, _ = ntk_against_jacrev(model, tokens, lambda p: p.position.table)
    assert own.sum() == 64

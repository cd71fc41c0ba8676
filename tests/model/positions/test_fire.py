"""FIRE: bias(i, j) = f_theta(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1) (Li et al.
2023, arXiv 2310.04418, section 3), f_theta a 1 -> hidden -> H ReLU MLP.

Every expected value is an independent NumPy (float64) transcription of the paper's formula,
given the module's MLP weights, c and L.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, TrialConfig, from_dict, replace, to_dict, validate
from rope_lab.model.positions.fire import FireConfig
from rope_lab.model.positions.modules import NoPE
from rope_lab.model.positions.modules.fire import Fire
from rope_lab.model.transformer import count_params
from rope_lab.trial.train import make_model, train
from tests.helpers import ntk_against_jacrev, tiny_trial


def random_params(seed: int, heads: int, hidden: int, c: float, threshold: float) -> dict:
    """MLP weights (standard normal, float32) and the given c, L."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    return {
        "w1": normal(hidden),
        "b1": normal(hidden),
        "w2": normal(heads, hidden),
        "b2": normal(heads),
        "c": c,
        "threshold": threshold,
    }


def encoding(p: dict) -> Fire:
    """A FIRE module with the MLP weights, c and L of `p` set directly."""
    heads, hidden = p["w2"].shape
    enc = Fire(heads, hidden, 1.0, 1.0, key=jax.random.PRNGKey(0))
    values = [jnp.asarray(p[k], jnp.float32) for k in ("w1", "b1", "w2", "b2")]
    values += [jnp.log(jnp.float32(p["c"])), jnp.log(jnp.float32(p["threshold"]))]
    where = lambda e: (e.w1, e.b1, e.w2, e.b2, e.log_c, e.log_threshold)
    return eqx.tree_at(where, enc, values)


def params_of(enc: Fire) -> dict:
    """The module's MLP weights, c and L, in float64."""
    f64 = lambda x: np.asarray(x, np.float64)
    return {
        "w1": f64(enc.w1),
        "b1": f64(enc.b1),
        "w2": f64(enc.w2),
        "b2": f64(enc.b2),
        "c": np.exp(f64(enc.log_c)),
        "threshold": np.exp(f64(enc.log_threshold)),
    }


def psi(x, c):
    """log(c x + 1)."""
    return np.log(c * x + 1.0)


def fire_input(p: dict, q_pos, k_pos) -> np.ndarray:
    """(Lq, Lk) float64: psi(i - j) / psi(max(L, i)), the distance clamped at 0 for j > i."""
    q = np.asarray(q_pos, np.float64)
    d = np.maximum(q[:, None] - np.asarray(k_pos, np.float64)[None, :], 0.0)
    return psi(d, p["c"]) / psi(np.maximum(p["threshold"], q), p["c"])[:, None]


def fire_bias(p: dict, q_pos, k_pos) -> np.ndarray:
    """(H, Lq, Lk) float64: b_h(i, j) = sum_d w2_hd relu(w1_d x_ij + b1_d) + b2_h."""
    x = fire_input(p, q_pos, k_pos)
    hidden = np.maximum(x[..., None] * p["w1"] + p["b1"], 0.0)  # (Lq, Lk, hidden)
    return np.einsum("qkd,hd->hqk", hidden, p["w2"]) + p["b2"][:, None, None]


scalars = st.tuples(st.floats(-3.0, 1.0), st.floats(0.0, 4.0))  # log10 c, log10 L


FORMULA_CASES = {
    "seed": st.integers(0, 2**31 - 1),
    "heads": st.integers(1, 4),
    "hidden": st.integers(1, 40),
    "log_cl": scalars,
    "offset": st.integers(0, 5000),
    "gaps": st.lists(st.integers(1, 40), min_size=6, max_size=6),
}


def _paper_formula_law(seed, heads, hidden, log_cl, offset, gaps):
    """The (H, 7, 7) bias at gapped positions equals fire_bias in float64."""
    p = random_params(seed, heads, hidden, 10 ** log_cl[0], 10 ** log_cl[1])
    enc = encoding(p)
    pos = offset + np.concatenate([[0], np.cumsum(gaps)])
    bias = enc.bias(jnp.asarray(pos), jnp.asarray(pos))
    assert bias.shape == (heads, 7, 7) and bias.dtype == jnp.float32
    got = np.asarray(bias, np.float64)
    want = fire_bias(params_of(enc), pos, pos)
    scale = 1 + np.abs(p["w2"]).sum(1).max() * (1 + np.abs(p["w1"]).max() + np.abs(p["b1"]).max())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale)


# each (heads, hidden) shape draws new XLA programs: three draws by default, twelve -m slow
@settings(max_examples=3, deadline=None)
@given(**FORMULA_CASES)
def test_bias_is_the_paper_formula(seed, heads, hidden, log_cl, offset, gaps):
    _paper_formula_law(seed, heads, hidden, log_cl, offset, gaps)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(**FORMULA_CASES)
def test_bias_is_the_paper_formula_extended(seed, heads, hidden, log_cl, offset, gaps):
    _paper_formula_law(seed, heads, hidden, log_cl, offset, gaps)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), shift=st.integers(1, 184))
def test_bias_depends_on_distance_only_while_queries_are_within_the_threshold(seed, shift):
    """max(L, i) = L for every query, so the bias is a function of i - j alone."""
    enc = encoding(random_params(seed, 3, 32, 0.3, 200.0))
    pos = jnp.arange(16, dtype=jnp.int32)  # the largest query, 15 + shift, stays <= L = 200
    whole = np.asarray(enc.bias(pos, pos))
    np.testing.assert_array_equal(np.asarray(enc.bias(pos + shift, pos + shift)), whole)
    # Beyond L the normaliser grows with the query: the same distances map to other inputs.
    x_far = np.asarray(enc.mlp_input(pos + 1000, pos + 1000))
    x_near = np.asarray(enc.mlp_input(pos + shift, pos + shift))
    below = np.tril_indices(16, -1)
    assert np.all(x_far[below] < x_near[below])


@settings(max_examples=20, deadline=None)
@given(
    log_cl=scalars,
    offset=st.integers(0, 10**6),
    gaps=st.lists(st.integers(1, 5000), min_size=5, max_size=5),
)
def test_mlp_input_is_interpolated_into_the_unit_interval_at_any_length(log_cl, offset, gaps):
    """For i > L the input is psi(i - j) / psi(i) in [0, 1] (1 for the first key, j = 0): a
    query at any length sees inputs from the range it saw in training."""
    c, threshold = 10 ** log_cl[0], 10 ** log_cl[1]
    enc = encoding(random_params(0, 1, 1, c, threshold))
    p = params_of(enc)
    pos = np.concatenate([[0], offset + np.cumsum(gaps)])
    x = np.asarray(enc.mlp_input(jnp.asarray(pos), jnp.asarray(pos)), np.float64)
    causal = np.tril(np.ones((6, 6), bool))
    assert np.all(x[causal] >= 0) and np.all(x[causal] <= 1)
    assert np.all(x[~causal] == 0)  # j > i: the distance is clamped at 0, psi(0) = 0
    np.testing.assert_allclose(x, fire_input(p, pos, pos), rtol=2e-6, atol=1e-7)
    beyond = pos > p["threshold"]
    i = pos[beyond].astype(np.float64)[:, None]
    want = psi(np.maximum(i - pos[None, :], 0), p["c"]) / psi(i, p["c"])
    np.testing.assert_allclose(x[beyond], want, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(x[beyond, 0], 1.0, rtol=1e-6)


@settings(max_examples=10, deadline=None)
@given(start=st.integers(0, 9), stop=st.integers(10, 16), offset=st.integers(0, 200))
def test_block_bias_is_the_slice_of_the_whole(start, stop, offset):
    enc = encoding(random_params(7, 2, 32, 0.5, 100.0))
    pos = jnp.arange(16, dtype=jnp.int32) * 7 + offset  # queries on both sides of L = 100
    whole = np.asarray(enc.bias(pos, pos))
    block = np.asarray(enc.bias(pos[start:stop], pos[:stop]))
    # Bit-equal on CPU; a tolerance allows another backend to tile the MLP's contraction.
    np.testing.assert_allclose(block, whole[:, start:stop, :stop], rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(whole))


def test_model_logits_are_nope_logits_plus_the_bias():
    """First-layer logits of a FIRE model minus those of the same weights without position
    information equal the formula, at offset positions on both sides of L."""
    model = make_model(tiny_trial("fire", width=32, head_dim=8))
    enc = encoding(random_params(1, 4, 32, 0.3, 110.0))
    model = eqx.tree_at(lambda m: m.position, model, enc)
    nope = eqx.tree_at(lambda m: m.position, model, NoPE())
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) * 3 + 100  # 100 .. 133; L = 110
    diff = np.asarray(model.attention_logits(tokens, pos), np.float64) - np.asarray(
        nope.attention_logits(tokens, pos), np.float64
    )
    np.testing.assert_allclose(diff, fire_bias(params_of(enc), pos, pos), rtol=1e-5, atol=1e-4)


def test_config_fields_validation_and_parameter_count():
    cfg = from_dict(
        TrialConfig,
        {"model": {"position": {"kind": "fire", "fire": {"hidden": 8, "threshold_init": 64}}}},
    )
    assert cfg.model.position.options == FireConfig(hidden=8, c_init=0.1, threshold_init=64.0)
    assert to_dict(cfg)["model"]["position"]["fire"] == {
        "hidden": 8,
        "c_init": 0.1,
        "threshold_init": 64.0,
    }
    with pytest.raises(ConfigError, match=r"model.position.fire.width: unknown key 'width'"):
        from_dict(TrialConfig, {"model": {"position": {"kind": "fire", "fire": {"width": 1}}}})
    tiny = tiny_trial("fire")
    for key, value, message in [
        ("hidden", 0, "model.position.fire.hidden: must be >= 1, got 0"),
        ("c_init", 0.0, "model.position.fire.c_init: must be > 0, got 0.0"),
        ("threshold_init", -1.0, "model.position.fire.threshold_init: must be > 0, got -1.0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            validate(replace(tiny, **{f"model.position.fire.{key}": value}))
    n_heads = tiny.model.n_heads
    nope = count_params(make_model(tiny_trial("none")))
    for hidden in (32, 5):
        trial = validate(replace(tiny, **{"model.position.fire.hidden": hidden}))
        want = 1 * hidden + hidden + hidden * n_heads + n_heads + 2
        assert count_params(make_model(trial)) - nope == want
        assert FireConfig(hidden=hidden).n_params(trial.model, max_length=1) == want
    enc = make_model(validate(tiny)).position
    assert enc.w2.shape == (n_heads, 32)
    np.testing.assert_allclose(np.exp(enc.log_c), 0.1, rtol=1e-6)
    np.testing.assert_allclose(np.exp(enc.log_threshold), 512.0, rtol=1e-6)
    at_train_length = validate(replace(tiny, **{"model.position.fire.threshold_init": None}))
    threshold = np.exp(make_model(at_train_length).position.log_threshold)
    np.testing.assert_allclose(threshold, tiny.train.length, rtol=1e-6)
    # The MLP is drawn from the model's key: another seed, another bias.
    pos = jnp.arange(8)
    a, b = (
        FireConfig().build(tiny.model, max_length=16, train_length=16, key=k)
        for k in jax.random.split(jax.random.PRNGKey(0))
    )
    assert not np.allclose(a.bias(pos, pos), b.bias(pos, pos))


@pytest.mark.slow  # a short training run; the formula and NTK tests pin the numbers
def test_training_moves_the_mlp_c_and_threshold():
    cfg = tiny_trial("fire", steps=20)
    start = make_model(cfg).position
    trained = train(cfg).model.position
    moved = {
        name: np.asarray(getattr(trained, name)) != np.asarray(getattr(start, name))
        for name in ("w1", "b1", "w2", "b2", "log_c", "log_threshold")
    }
    assert moved["b2"].all() and moved["log_c"] and moved["log_threshold"]
    # ReLU units dead on every input seen get no gradient; every live one moves.
    pos = jnp.arange(cfg.train.length)
    x = np.asarray(start.mlp_input(pos, pos))[np.tril_indices(cfg.train.length)]
    live = (x[:, None] * np.asarray(start.w1) + np.asarray(start.b1) > 0).any(0)
    assert live.sum() >= 8
    assert moved["w1"][live].all() and moved["b1"][live].all() and moved["w2"][:, live].all()


@pytest.mark.slow  # ~25 s, beside tests/ntk/test_kernels.py::test_matches_bruteforce
def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a FIRE model equals the brute-force kernel from jax.jacrev over all
    parameters, FIRE's MLP, c and L included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("fire", width=16, head_dim=8, vocab=11))
    model = eqx.tree_at(lambda m: m.position, model, encoding(random_params(2, 2, 32, 0.7, 3.0)))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    fire_params = lambda p: (
        [getattr(p.position, f) for f in ("w1", "b1", "w2", "b2")]
        + [p.position.log_c, p.position.log_threshold]
    )
    per_seq, own, columns = ntk_against_jacrev(model, tokens, fire_params)
    assert own.sum() == 2 * 32 + 33 * 2 + 2
    scalars = columns(lambda p: (p.position.log_c, p.position.log_threshold))
    assert np.all(np.abs(per_seq[..., scalars]).max((0, 1)) > 0)  # c and L reach the outputs

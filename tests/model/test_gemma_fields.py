"""Gemma 3's model fields, each against a closed form or a brute-force equivalent: zero-centred
RMSNorm (`model.norm_zero_centred`), GeGLU (`model.mlp: geglu`), the sqrt(width) embedding
(`model.scale_embedding`), the query scalar (`model.attention_scale_dim`), soft-capped logits
(`model.logit_softcap`) and sandwich norms (`model.norm_placement: sandwich`); the attention
implementations and cached decoding agree on a model with all of them, and the planned
parameter count holds."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import LayerConfig, PositionConfig
from rope_lab.model.attention_layer import attention_scale
from rope_lab.model.layers import MLP, Norm
from rope_lab.model.positions.rotary import RopeConfig
from rope_lab.model.transformer import count_params, softcap
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.train import make_model
from rope_lab.typed import ConfigError
from tests.model.test_pretrained_arch import (
    _randomise,
    _tokens,
    _trial,
    assert_decoding_matches_forward,
    assert_implementations_agree,
    forward,
)

RMS = {"model.norm": "rmsnorm", "model.mlp": "swiglu", "model.norm_eps": 1e-6}
GEMMA = {
    **RMS,
    "model.mlp": "geglu",
    "model.norm_placement": "sandwich",
    "model.qk_norm": True,
    "model.norm_zero_centred": True,
    "model.scale_embedding": True,
    "model.attention_scale_dim": 12.0,
    "model.logit_softcap": 3.0,
    "model.tie_embeddings": True,
    "model.kv_heads": 2,
}
# a sliding layer (window 3) with a rope base of its own, then a full one
LOCAL = LayerConfig(window=3, position=PositionConfig(options=RopeConfig(theta=500.0)))


def test_zero_centred_norm_with_weight_w_is_plain_rmsnorm_with_weight_one_plus_w():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 8))
    plain, centred = Norm(8, "rmsnorm", 1e-6), Norm(8, "rmsnorm", 1e-6, zero_centred=True)
    assert np.all(np.asarray(centred.weight) == 0.0)  # initialised to the identity scale
    np.testing.assert_allclose(centred(x), plain(x), rtol=1e-6)
    w = jax.random.normal(jax.random.PRNGKey(1), (8,))
    shifted = eqx.tree_at(lambda n: n.weight, centred, w)
    np.testing.assert_allclose(
        shifted(x), eqx.tree_at(lambda n: n.weight, plain, 1.0 + w)(x), rtol=1e-6
    )


def test_softcap_is_c_tanh_x_over_c():
    assert float(softcap(jnp.float32(3.0), 3.0)) == pytest.approx(3.0 * math.tanh(1.0), rel=1e-6)
    assert float(softcap(jnp.float32(3.0 * math.atanh(0.5)), 3.0)) == pytest.approx(1.5, rel=1e-6)
    assert float(softcap(jnp.float32(1e6), 3.0)) == pytest.approx(3.0)


def test_the_readout_caps_the_tied_logits():
    model = _randomise(make_model(_trial(**GEMMA)))
    x = 4.0 * jax.random.normal(jax.random.PRNGKey(2), (6, 32))
    uncapped = np.asarray(model.final_norm(x) @ model.embedding.T)
    assert np.abs(uncapped).max() > 6.0  # well into the cap's bend
    np.testing.assert_allclose(model.readout(x), 3.0 * np.tanh(uncapped / 3.0), atol=1e-5)


def test_geglu_is_down_of_gelu_tanh_gate_times_up():
    cfg = _trial(**{**RMS, "model.mlp": "geglu"}).model
    mlp = MLP(cfg, key=jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (4, cfg.width))
    g, u = np.asarray(x @ mlp.gate.weight.T), np.asarray(x @ mlp.up.weight.T)
    gelu_tanh = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)))
    np.testing.assert_allclose(mlp(x), (gelu_tanh * u) @ np.asarray(mlp.down.weight).T, atol=1e-6)
    assert float(jax.nn.gelu(1.0, approximate=True)) == pytest.approx(0.8411920, rel=1e-6)


def test_scaled_embedding_is_sqrt_width_times_the_rows_and_the_tied_readout_is_not():
    model = make_model(_trial(**GEMMA))
    tokens = _tokens()
    positions = jnp.arange(tokens.shape[0])
    want = math.sqrt(32) * np.asarray(model.embedding[tokens])
    np.testing.assert_allclose(model.embed(tokens, positions), want, rtol=1e-6)
    plain = make_model(_trial(**{**GEMMA, "model.scale_embedding": False}))
    np.testing.assert_allclose(plain.embed(tokens, positions), want / math.sqrt(32), rtol=1e-6)


def test_attention_scale_dim_sets_the_logit_scale():
    assert attention_scale(_trial(**{**RMS, "model.attention_scale_dim": 12.0}).model) == (
        pytest.approx(12.0**-0.5)
    )
    assert attention_scale(_trial(**RMS).model) == pytest.approx(8.0**-0.5)  # head_dim 8


def test_a_quarter_scale_dim_equals_doubled_queries():
    """1/sqrt(d/4) = 2/sqrt(d): the model with attention_scale_dim d_head/4 equals the plain
    model with its query weights doubled (no QK-norm to undo them)."""
    model = _randomise(make_model(_trial(**{**RMS, "model.attention_scale_dim": 2.0})))
    plain = _randomise(make_model(_trial(**RMS)))
    doubled = eqx.tree_at(lambda m: m.blocks.attn.q.weight, plain, 2.0 * plain.blocks.attn.q.weight)
    tokens = _tokens()
    np.testing.assert_allclose(forward(model, tokens), forward(doubled, tokens), rtol=1e-5)


@pytest.mark.parametrize(("placement", "invariant"), [("sandwich", True), ("pre", False)])
def test_sandwich_norms_undo_the_scale_of_each_sublayers_output(placement, invariant):
    model = _randomise(make_model(_trial(**{**RMS, "model.norm_placement": placement})))
    tokens = _tokens()
    for where in (lambda m: m.blocks.attn.o.weight, lambda m: m.blocks.mlp.down.weight):
        scaled = eqx.tree_at(where, model, 5.0 * where(model))
        same = np.allclose(forward(model, tokens), forward(scaled, tokens), rtol=1e-4, atol=1e-4)
        assert same is invariant


def test_sandwich_normalises_what_each_sublayer_reads():
    """Unlike OLMo 2's post-norm, the sandwich's attention reads norm(x): the same for x and
    7x."""
    base = {**RMS, "model.norm_eps": 1e-9}
    for placement, invariant in (("sandwich", True), ("post", False)):
        model = _randomise(make_model(_trial(**{**base, "model.norm_placement": placement})))
        first = jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, model.blocks)
        x = model.embed(_tokens(), jnp.arange(12))
        same = np.allclose(first.attention_input(x), first.attention_input(7.0 * x), rtol=1e-5)
        assert same is invariant


def test_gemma_model_is_the_same_under_the_blocked_kernel():
    assert_implementations_agree({**GEMMA, "model.layers": (LOCAL, LayerConfig())})


@pytest.mark.slow
def test_gemma_decoding_with_a_cache_equals_the_forward():
    """Past the sliding window of 3, with the local rope base."""
    model = _randomise(make_model(_trial(**GEMMA, **{"model.layers": (LOCAL, LayerConfig())})))
    assert_decoding_matches_forward(model)


def test_gemma_parameters_are_planned():
    trial = _trial(**GEMMA)
    model = make_model(trial)
    assert model.blocks.attn_post_norm.weight.shape == (2, 32)
    assert estimate_cost(trial)["n_params"] == count_params(model)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"model.norm_zero_centred": True},
            r"^model.norm_zero_centred: needs model.norm: rmsnorm, got 'layernorm'$",
        ),
        ({**RMS, "model.logit_softcap": 0.0}, r"^model.logit_softcap: must be > 0, got 0.0$"),
        (
            {**RMS, "model.attention_scale_dim": 4.0, "model.parametrization": "mup"},
            r"^model.attention_scale_dim: muP sets the attention scale itself",
        ),
        ({"model.norm_placement": "both"}, r"^model.norm_placement: "),
    ],
)
def test_bad_gemma_fields_are_refused_in_one_line(changes, match):
    with pytest.raises(ConfigError, match=match):
        _trial(**changes)

"""Attention sinks (`model.attention_fn: sinks`) against an independent dense transcription of
a_ij = exp(z_ij) / (exp(s_h) + sum_j' exp(z_ij')), on every path, with its limits, and
transformers' `GptOssAttention` on the same weights."""

from __future__ import annotations

import equinox as eqx
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


# GptOssAttention's shape here: grouped-query heads, q/k/v biases, a window on alternate layers
HF_HEADS, HF_KV_HEADS, HF_DH, HF_WINDOW, HF_THETA = 4, 2, 8, 4, 10000.0


def gpt_oss_pair(layer_type: str):
    """A tiny random `GptOssAttention` of `layer_type` (in float64, its sinks, q/k/v biases
    and weights drawn at random, its output bias zero: rope_lab's output projection has none)
    and rope_lab's sinks layer holding the same arrays, with its encoding (RoPE at the same
    theta, no YaRN) and layer kind (the same sliding window on a sliding layer)."""
    import torch
    from transformers import GptOssConfig
    from transformers.models.gpt_oss import modeling_gpt_oss

    from rope_lab.config import LayerConfig
    from rope_lab.model.attention_layer import Attention
    from rope_lab.model.factory import make_model

    width = HF_HEADS * HF_DH
    hf_cfg = GptOssConfig(
        hidden_size=width, num_attention_heads=HF_HEADS, num_key_value_heads=HF_KV_HEADS,
        head_dim=HF_DH, rope_parameters={"rope_type": "default", "rope_theta": HF_THETA},
        sliding_window=HF_WINDOW, layer_types=["sliding_attention", "full_attention"],
        num_hidden_layers=2, attention_bias=True, vocab_size=24,
    )  # fmt: skip
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = modeling_gpt_oss.GptOssAttention(hf_cfg, layer_idx=hf_cfg.layer_types.index(layer_type))
    hf = hf.double().eval()
    with torch.no_grad():
        hf.sinks.normal_(0.0, 1.5)
        for proj in (hf.q_proj, hf.k_proj, hf.v_proj):
            proj.bias.normal_(0.0, 0.5)
        hf.o_proj.bias.zero_()
    cfg = validate(
        replace(
            tiny_trial("rope", width=width, head_dim=HF_DH),
            **{"model.attention_fn": "sinks", "model.kv_heads": HF_KV_HEADS,
               "model.qkv_bias": True, "model.position.rope.theta": HF_THETA},
        )
    )  # fmt: skip
    layer = Attention(cfg.model, train_length=cfg.train.length, key=jax.random.PRNGKey(0))
    as_jnp = lambda t: jnp.asarray(t.detach().numpy(), jnp.float32)
    projections = lambda a: (a.q, a.k, a.v)
    layer = eqx.tree_at(
        lambda a: (*(p.weight for p in projections(a)), *(p.bias for p in projections(a)),
                   a.o.weight, a.variant.params),
        layer,
        (*(as_jnp(p.weight) for p in (hf.q_proj, hf.k_proj, hf.v_proj)),
         *(as_jnp(p.bias) for p in (hf.q_proj, hf.k_proj, hf.v_proj)),
         as_jnp(hf.o_proj.weight), as_jnp(hf.sinks)),
    )  # fmt: skip
    kind = LayerConfig(window=HF_WINDOW if layer_type == "sliding_attention" else None)
    return hf, hf_cfg, layer, make_model(cfg).encoding_of(0), kind


@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
def test_the_layer_equals_transformers_gpt_oss_attention(layer_type):
    """The same weights, sinks, hidden states and positions (offset by 3, so RoPE's phase
    matters): rope_lab's layer output equals GptOssAttention's (eager, its own causal or
    sliding-window mask from `transformers.masking_utils`) to float32 rounding, and the
    sinks matter (zero sinks move the output)."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    from transformers import masking_utils

    hf, hf_cfg, layer, encoding, kind = gpt_oss_pair(layer_type)
    x = np.random.default_rng(1).normal(size=(1, LENGTH, HF_HEADS * HF_DH))
    positions = np.arange(LENGTH) + 3
    hidden = torch.from_numpy(x)
    position_ids = torch.from_numpy(positions)[None]
    cos, sin = modeling.GptOssRotaryEmbedding(hf_cfg)(hidden, position_ids)
    make_mask = {
        "full_attention": masking_utils.create_causal_mask,
        "sliding_attention": masking_utils.create_sliding_window_causal_mask,
    }[layer_type]
    mask = make_mask(config=hf_cfg, inputs_embeds=hidden, attention_mask=None, cache=None,
                     position_ids=position_ids)  # fmt: skip
    with torch.no_grad():
        want, _ = hf(hidden, (cos.double(), sin.double()), mask)
    want = want[0].numpy()
    got = np.asarray(layer(jnp.asarray(x[0], jnp.float32), jnp.asarray(positions), encoding, kind))
    worst = float(np.abs(got - want).max())  # ~1e-7: float32 against float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    no_sinks = eqx.tree_at(lambda a: a.variant.params, layer, jnp.zeros(HF_HEADS))
    moved = no_sinks(jnp.asarray(x[0], jnp.float32), jnp.asarray(positions), encoding, kind)
    assert float(np.abs(np.asarray(moved) - want).max()) > 100 * worst

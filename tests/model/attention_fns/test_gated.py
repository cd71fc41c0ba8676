"""Gated attention (`model.attention_fn: gated`, element-wise; `gated_head`, head-wise) against
an independent dense transcription of o_h = softmax(q_h k_h^T / sqrt(d)) v_h * sigmoid(x W_h),
its limits, and transformers' `Qwen3NextAttention` on the same weights."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import replace, validate
from rope_lab.hf.config import CheckpointError
from rope_lab.model.attention_layer import Attention
from rope_lab.model.factory import make_model
from rope_lab.ntk.kernels import param_group
from tests.helpers import tiny_trial

HEADS, DH, LENGTH = 4, 8, 11
WIDTH = HEADS * DH


def _trial(fn: str, kind: str = "none", **changes):
    base = tiny_trial(kind, width=WIDTH, head_dim=DH)
    return validate(replace(base, **{"model.attention_fn": fn, **changes}))


def _layer_and_encoding(fn: str, seed: int = 0, kind: str = "none", **changes):
    cfg = _trial(fn, kind, **changes)
    layer = Attention(cfg.model, train_length=cfg.train.length, key=jax.random.PRNGKey(seed))
    return layer, make_model(cfg).encoding_of(0)


def dense(layer: Attention, x) -> np.ndarray:
    """(L, D) output of a NoPE layer, written out in float64 NumPy: per head h, causal
    softmax(q_h k_h^T scale) v_h, times sigmoid(x W_gate) (per dimension or per head), the
    heads concatenated, then W_o."""
    x = np.asarray(x, np.float64)
    w = {n: np.asarray(getattr(layer, n).weight, np.float64) for n in ("q", "k", "v", "o", "gate")}
    q, k, v = (x @ w[n].T for n in ("q", "k", "v"))
    gate = 1.0 / (1.0 + np.exp(-(x @ w["gate"].T)))
    per_head = gate.shape[-1] // HEADS
    causal = np.tril(np.ones((len(x), len(x)), bool))
    heads = []
    for h in range(HEADS):
        part = slice(h * DH, (h + 1) * DH)
        z = np.where(causal, q[:, part] @ k[:, part].T * layer.scale, -np.inf)
        a = np.exp(z - z.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        heads.append(a @ v[:, part] * gate[:, h * per_head : (h + 1) * per_head])
    return np.concatenate(heads, axis=-1) @ w["o"].T


@pytest.mark.parametrize("fn", ["gated", "gated_head"])
@pytest.mark.parametrize("implementation", ["reference", "blocked"])
def test_the_layer_equals_the_dense_formula(fn, implementation):
    layer, encoding = _layer_and_encoding(fn, **{"model.attention": implementation})
    assert layer.gate is not None
    assert layer.gate.weight.shape == ({"gated": WIDTH, "gated_head": HEADS}[fn], WIDTH)
    x = jax.random.normal(jax.random.PRNGKey(7), (LENGTH, WIDTH))
    got = layer(x, jnp.arange(LENGTH), encoding)
    np.testing.assert_allclose(got, dense(layer, x), rtol=2e-5, atol=2e-6)


def test_a_zero_gate_halves_softmax_and_a_head_gate_is_an_element_gate_repeated():
    x = jax.random.normal(jax.random.PRNGKey(3), (LENGTH, WIDTH))
    positions = jnp.arange(LENGTH)
    plain, encoding = _layer_and_encoding("softmax", kind="rope")
    assert plain.gate is None
    for fn in ("gated", "gated_head"):
        gated, _ = _layer_and_encoding(fn, kind="rope")
        zero = jnp.zeros_like(gated.gate.weight)  # sigmoid(0) = 1/2 on every head
        same = lambda a: (a.q, a.k, a.v, a.o)
        gated = eqx.tree_at(same, gated, same(plain))
        gated = eqx.tree_at(lambda a: a.gate.weight, gated, zero)
        np.testing.assert_allclose(
            gated(x, positions, encoding), 0.5 * plain(x, positions, encoding), rtol=1e-5, atol=1e-6
        )
    head, _ = _layer_and_encoding("gated_head", seed=1, kind="rope")
    element, _ = _layer_and_encoding("gated", seed=1, kind="rope")
    element = eqx.tree_at(lambda a: a.gate.weight, element, jnp.repeat(head.gate.weight, DH, 0))
    np.testing.assert_allclose(
        element(x, positions, encoding), head(x, positions, encoding), rtol=1e-5, atol=1e-6
    )


def test_the_gate_is_an_output_side_parameter_with_its_own_key():
    assert param_group(".blocks.attn.gate.weight") == "attention_vo"
    plain, _ = _layer_and_encoding("softmax", kind="rope")
    gated, _ = _layer_and_encoding("gated", kind="rope")
    for name in ("q", "k", "v", "o"):  # adding the gate moved no other weight
        np.testing.assert_array_equal(getattr(plain, name).weight, getattr(gated, name).weight)


def test_a_gated_trial_is_its_own_trial_labelled_and_not_exported():
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.hf.config import hf_config
    from rope_lab.results.columns import flatten_config

    base = validate(tiny_trial())
    ids = set()
    for fn in ("gated", "gated_head"):
        cfg = validate(replace(base, **{"model.attention_fn": fn}))
        assert cfg.trial_id.startswith(f"passkey-rope-{fn}-w32-d1-L16-s0-")
        ids.add(cfg.trial_id)
        row = pl.DataFrame([{**flatten_config(cfg), "method": "none", "factor": 1.0}])
        assert row.select(label_expr(row.columns))["label"].item() == f"rope +{fn}"
        llama = replace(cfg.model, norm="rmsnorm", mlp="swiglu")
        with pytest.raises(CheckpointError, match=rf"^model\.attention_fn: '{fn}' has no Hugging"):
            hf_config(llama, vocab_size=24, train_length=16)
    assert len(ids | {base.trial_id}) == 3


def test_the_element_gate_equals_transformers_qwen3_next_attention():
    """Qwen3-Next computes the gate from the query projection's second half per head; the same
    weights, split into rope_lab's q and gate projections, give the same layer output (RoPE,
    grouped-query heads and zero-centred QK-norm included)."""
    torch = pytest.importorskip("torch")
    qwen = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    from transformers import Qwen3NextConfig

    kv_heads, theta = 2, 10000.0
    hf_cfg = Qwen3NextConfig(
        hidden_size=WIDTH, num_attention_heads=HEADS, num_key_value_heads=kv_heads, head_dim=DH,
        partial_rotary_factor=1.0, rope_parameters={"rope_type": "default", "rope_theta": theta},
        rms_norm_eps=1e-6, attention_bias=False, vocab_size=24,
    )  # fmt: skip
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = qwen.Qwen3NextAttention(hf_cfg, layer_idx=0).double().eval()
    with torch.no_grad():
        for norm in (hf.q_norm, hf.k_norm):
            norm.weight.normal_(0.0, 0.3)
    layer, encoding = _layer_and_encoding(
        "gated", kind="rope",
        **{"model.kv_heads": kv_heads, "model.qk_norm": True, "model.norm": "rmsnorm",
           "model.norm_eps": 1e-6,
           "model.position.rope.theta": theta},
    )  # fmt: skip
    as_np = lambda t: jnp.asarray(t.detach().numpy(), jnp.float32)
    q_and_gate = as_np(hf.q_proj.weight).reshape(HEADS, 2, DH, WIDTH)
    layer = eqx.tree_at(
        lambda a: (a.q.weight, a.gate.weight, a.k.weight, a.v.weight, a.o.weight,
                   a.q_norm.weight, a.k_norm.weight),
        layer,
        (q_and_gate[:, 0].reshape(-1, WIDTH), q_and_gate[:, 1].reshape(-1, WIDTH),
         as_np(hf.k_proj.weight), as_np(hf.v_proj.weight), as_np(hf.o_proj.weight),
         1.0 + as_np(hf.q_norm.weight), 1.0 + as_np(hf.k_norm.weight)),
    )  # fmt: skip
    x = np.random.default_rng(0).normal(size=(1, LENGTH, WIDTH))
    rotary = qwen.Qwen3NextRotaryEmbedding(hf_cfg)
    positions = torch.arange(LENGTH)[None]
    cos, sin = rotary(torch.from_numpy(x), positions)
    mask = torch.full((LENGTH, LENGTH), -torch.inf).triu(1)[None, None].double()
    with torch.no_grad():
        want, _ = hf(torch.from_numpy(x), (cos.double(), sin.double()), mask)
    got = layer(jnp.asarray(x[0], jnp.float32), jnp.arange(LENGTH), encoding)
    np.testing.assert_allclose(got, want[0].numpy(), rtol=1e-4, atol=2e-5)

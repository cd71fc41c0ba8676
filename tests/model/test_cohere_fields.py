"""Cohere 2's model fields, each against a closed form: the parallel block
(`model.block: parallel`: with attention zeroed it is x + mlp(norm x), and the MLP reads the
block's input, not attention's residual), the scaled logits (`model.logit_scale`) and the
LayerNorm without bias (`model.norm: layernorm_no_bias`); the interleaved-to-half-split row
order of `rope_lab.hf.cohere` leaves every rotated query-key product unchanged; the attention
implementations and cached decoding agree on a model with all of them, and the planned
parameter count holds."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import LayerConfig, PositionConfig
from rope_lab.hf.cohere import half_split_rows, interleaved_rows
from rope_lab.model.layers import Norm
from rope_lab.model.rotation import apply_rotary
from rope_lab.model.transformer import count_params
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.train import make_model
from rope_lab.typed import ConfigError
from tests.model.test_pretrained_arch import (
    _randomise,
    _tokens,
    _trial,
    assert_decoding_matches_forward,
    assert_implementations_agree,
)

NOPE = PositionConfig(kind="none")
COHERE = {
    "model.norm": "layernorm_no_bias",
    "model.mlp": "swiglu",
    "model.block": "parallel",
    "model.logit_scale": 0.25,
    "model.tie_embeddings": True,
    "model.kv_heads": 2,
}
# Cohere 2's layout: a sliding-window RoPE layer (window 3), then a full NoPE one
LAYOUT = {"model.layers": (LayerConfig(window=3), LayerConfig(position=NOPE))}


def _first_block(model):
    return jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, model.blocks)


def test_parallel_block_with_zero_attention_is_x_plus_mlp_of_norm_x():
    model = _randomise(make_model(_trial(**COHERE)))
    model = eqx.tree_at(lambda m: m.blocks.attn.o.weight, model, 0 * model.blocks.attn.o.weight)
    block = _first_block(model)
    assert block.mlp_norm is None  # one norm per block
    x = model.embed(_tokens(), jnp.arange(12))
    want = x + block.mlp(block.attn_norm(x))
    out = block(x, jnp.arange(12), model.encoding_of(0))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_parallel_mlp_reads_the_blocks_input_not_attentions_residual():
    """x + a + mlp(norm x), a the attention output: the block less x + a is mlp(norm x) alone,
    where a sequential block's MLP would read norm(x + a)."""
    model = _randomise(make_model(_trial(**COHERE)))
    block = _first_block(model)
    x, positions = model.embed(_tokens(), jnp.arange(12)), jnp.arange(12)
    a = block.attn(block.attn_norm(x), positions, model.encoding_of(0))
    assert np.abs(np.asarray(a)).max() > 0.1
    out = block(x, positions, model.encoding_of(0))
    np.testing.assert_allclose(out - x - a, block.mlp(block.attn_norm(x)), atol=2e-5)
    assert not np.allclose(out - x - a, block.mlp(block.attn_norm(x + a)), atol=1e-2)


@pytest.mark.parametrize("scale", [0.25, 3.0])
def test_logit_scale_s_scales_the_logits_by_s(scale):
    """The same weights (the same seed) read out with and without the scale."""
    scaled = _randomise(make_model(_trial(**{**COHERE, "model.logit_scale": scale})))
    plain = _randomise(make_model(_trial(**{**COHERE, "model.logit_scale": 1.0})))
    x = scaled.embed(_tokens(), jnp.arange(12))
    assert np.array_equal(x, plain.embed(_tokens(), jnp.arange(12)))
    want = scale * np.asarray(plain.readout(x))
    np.testing.assert_allclose(scaled.readout(x), want, rtol=1e-6, atol=1e-7)


def test_layernorm_without_bias_is_weight_times_centred_x_over_its_deviation():
    x = 3.0 + jax.random.normal(jax.random.PRNGKey(0), (5, 8))
    w = jax.random.normal(jax.random.PRNGKey(1), (8,))
    norm = eqx.tree_at(lambda n: n.weight, Norm(8, "layernorm_no_bias", 0.1), w)
    assert norm.bias is None
    xs = np.asarray(x, dtype=np.float64)
    centred = xs - xs.mean(-1, keepdims=True)
    want = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 0.1) * np.asarray(w)
    np.testing.assert_allclose(norm(x), want, rtol=1e-5, atol=1e-6)


def _interleaved_rotation(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray):
    """Cohere's RoPE, transcribed: dims (2i, 2i + 1) rotated by positions x inv_freq[i];
    x (L, H, Dh)."""
    angle = positions[:, None, None] * inv_freq[None, None, :]  # (L, 1, Dh/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
    out[..., 1::2] = odd * np.cos(angle) + even * np.sin(angle)
    return out


def test_half_split_rows_turn_interleaved_rotary_scores_into_rope_labs():
    """q.k after Cohere's interleaved rotation of the projection's rows equals q.k after
    rope_lab's half-split rotation of the rows in `half_split_rows` order, at every pair of
    positions; `interleaved_rows` undoes the order."""
    heads, d, width, length = 2, 8, 6, 7
    rng = np.random.default_rng(0)
    wq, wk = rng.normal(size=(2, heads * d, width))
    x = rng.normal(size=(length, width))
    positions = np.arange(length) * 3.0
    inv_freq = 10.0 ** (-np.arange(d // 2) / (d // 2))

    def heads_of(w):
        return (x @ w.T).reshape(length, heads, d)

    q, k = (_interleaved_rotation(heads_of(w), positions, inv_freq) for w in (wq, wk))
    want = np.einsum("qhd,khd->hqk", q, k)
    order = half_split_rows(heads, d)
    q2, k2 = (
        np.asarray(apply_rotary(jnp.asarray(heads_of(w[order])), positions, inv_freq, 1.0))
        for w in (wq, wk)
    )
    np.testing.assert_allclose(np.einsum("qhd,khd->hqk", q2, k2), want, rtol=1e-4, atol=1e-4)
    unordered = (np.asarray(apply_rotary(jnp.asarray(heads_of(w)), positions, inv_freq, 1.0))
                 for w in (wq, wk))  # fmt: skip
    assert not np.allclose(np.einsum("qhd,khd->hqk", *unordered), want, atol=1e-2)
    assert order[:8] == [0, 2, 4, 6, 1, 3, 5, 7] and order[8:12] == [8, 10, 12, 14]
    assert [order[i] for i in interleaved_rows(heads, d)] == list(range(heads * d))


def test_cohere_model_is_the_same_under_the_blocked_kernel():
    assert_implementations_agree({**COHERE, **LAYOUT})


@pytest.mark.slow
def test_cohere_decoding_with_a_cache_equals_the_forward():
    """Past the sliding window of 3, through the parallel block and the scaled readout."""
    assert_decoding_matches_forward(_randomise(make_model(_trial(**COHERE, **LAYOUT))))


def test_cohere_parameters_are_planned():
    trial = _trial(**COHERE)
    model = make_model(trial)
    assert model.blocks.mlp_norm is None and model.blocks.attn_norm.bias is None
    assert estimate_cost(trial)["n_params"] == count_params(model)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"model.logit_scale": 0.0}, r"^model.logit_scale: must be > 0, got 0.0$"),
        (
            {"model.block": "parallel", "model.norm_placement": "post"},
            r"^model.block: parallel has one norm before both sublayers; needs "
            r"model.norm_placement: pre, got 'post'$",
        ),
        ({"model.block": "both"}, r"^model.block: "),
    ],
)
def test_bad_cohere_fields_are_refused_in_one_line(changes, match):
    with pytest.raises(ConfigError, match=match):
        _trial(**changes)

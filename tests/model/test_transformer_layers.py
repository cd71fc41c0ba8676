"""Per-layer layouts (`model.layers`), Scalable-Softmax and Llama 4's query scaling.

Each law is checked against an independent computation: a layout equals the blocks applied one
by one by hand, a sliding window has the receptive field depth x (window - 1), the row scales
equal NumPy transcriptions of their definitions, and evaluation scaling touches exactly the
layer kinds it is asked to.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import (
    ConfigError,
    LayerConfig,
    ModelConfig,
    PositionConfig,
    TrialConfig,
    config_hash,
    from_dict,
    replace,
    to_dict,
    validate,
)
from rope_lab.model.positions.modules import NoPE
from rope_lab.model.transformer import count_params, with_scaling, with_temperature
from rope_lab.ntk.kernels import param_group
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.scaling_plan import log_length_temperature
from rope_lab.trial.train import make_model
from tests.helpers import ntk_against_jacrev, tiny_trial

ROPE_1E6 = {"position": {"kind": "rope", "rope": {"theta": 1.0e6}}}
NONE = {"position": {"kind": "none"}}


def layered(layers: list[dict], *, kind: str = "rope", depth: int = 4, **changes) -> TrialConfig:
    """A tiny trial with `model.layers` given as YAML-shaped mappings."""
    parsed = from_dict(TrialConfig, {"model": {"layers": layers}}).model.layers
    base = tiny_trial(kind, width=16, head_dim=4, depth=depth)
    return validate(replace(base, **{"model.layers": parsed, **changes}))


def tokens(length: int = 12, seed: int = 0) -> jax.Array:
    return jax.random.randint(jax.random.PRNGKey(seed), (length,), 0, 24)


def block(model, index: int):
    """Block `index` of the stacked blocks."""
    return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, model.blocks)


def by_hand(model, toks) -> np.ndarray:
    """Logits from the blocks applied one at a time, block l as kind l % P with its encoding."""
    positions = jnp.arange(toks.shape[-1], dtype=jnp.int32)
    pattern = model.config.pattern
    h = model.embed(toks, positions)
    for index in range(model.config.depth):
        kind = index % len(pattern)
        h = block(model, index)(h, positions, model.encoding_of(kind), pattern[kind])
    return np.asarray(model.head(model.final_norm(h)))


@pytest.mark.slow  # ~14 s
def test_a_layout_equals_its_blocks_applied_one_by_one():
    """A pattern (sliding RoPE, sliding RoPE with theta 1e6, full NoPE with Llama 4 scaling)
    repeated twice through depth 6 runs each block with its own kind."""
    model = make_model(
        layered(
            [
                {"window": 3},
                {"window": 5, **ROPE_1E6},
                {**NONE, "attn_scale": 0.5, "floor_scale": 2},
            ],
            depth=6,
        )
    )
    toks = tokens(14)
    np.testing.assert_allclose(np.asarray(model(toks)), by_hand(model, toks), rtol=2e-5, atol=2e-5)
    inv = [np.asarray(model.encoding_of(i).inv_freq.value) for i in (0, 1)]
    assert inv[0][1] == pytest.approx(1e4 ** (-2 / 4))
    assert inv[1][1] == pytest.approx(1e6 ** (-2 / 4))
    assert isinstance(model.encoding_of(2), NoPE)
    swapped = eqx.tree_at(
        lambda m: m.layer_positions, model, tuple(reversed(model.layer_positions))
    )
    assert not np.allclose(np.asarray(swapped(toks)), np.asarray(model(toks)), atol=1e-4)


def test_a_single_kind_layout_equals_the_model_wide_encoding():
    """layers [{position: rope theta 1e6}] is the model with model.position.rope.theta 1e6, and
    layers [{position: none}] under model.position rope is NoPE (same weights)."""
    wide = make_model(
        validate(
            replace(tiny_trial("rope", width=16, head_dim=4), **{"model.position.rope.theta": 1e6})
        )
    )
    per_layer = make_model(layered([ROPE_1E6], depth=1))
    per_layer = eqx.tree_at(lambda m: m.blocks, per_layer, wide.blocks)
    per_layer = eqx.tree_at(lambda m: (m.embedding, m.head), per_layer, (wide.embedding, wide.head))
    toks = tokens()
    np.testing.assert_allclose(np.asarray(per_layer(toks)), np.asarray(wide(toks)), atol=1e-5)
    nope_layers = make_model(layered([NONE], depth=1))
    nope = eqx.tree_at(lambda m: m.position, nope_layers, NoPE())
    nope = eqx.tree_at(lambda m: m.layer_positions, nope, ())
    np.testing.assert_allclose(np.asarray(nope_layers(toks)), np.asarray(nope(toks)), atol=1e-6)


@settings(max_examples=4, deadline=None)
@given(window=st.integers(1, 4), depth=st.sampled_from([1, 2]), seed=st.integers(0, 50))
def test_sliding_windows_give_a_receptive_field_of_depth_times_window(window, depth, seed):
    """With every layer on a window w, output i depends on tokens i - depth (w - 1) .. i only:
    changing the token just outside leaves it, changing the farthest one inside moves it."""
    model = make_model(layered([{"window": window}], depth=depth))
    length, i = 16, 15
    toks = np.asarray(tokens(length, seed))
    reach = depth * (window - 1)
    base = np.asarray(model(jnp.asarray(toks)))[i]
    outside, inside = toks.copy(), toks.copy()
    if i - reach - 1 >= 0:
        outside[i - reach - 1] = (outside[i - reach - 1] + 1) % 24
        np.testing.assert_allclose(np.asarray(model(jnp.asarray(outside)))[i], base, atol=1e-5)
    inside[i - reach] = (inside[i - reach] + 1) % 24
    assert np.abs(np.asarray(model(jnp.asarray(inside)))[i] - base).max() > 1e-4


def first_layer_logits(model, toks) -> np.ndarray:
    return np.asarray(model.attention_logits(toks), np.float64)


def test_llama4_query_scaling_is_the_hf_formula():
    """Query i's logits times 1 + attn_scale log(floor((p_i + 1) / floor_scale) + 1), as
    transformers' Llama4TextAttention, with positions p (here gapped)."""
    plain = make_model(layered([NONE], depth=1))
    scaled = make_model(layered([{**NONE, "attn_scale": 0.1, "floor_scale": 4}], depth=1))
    toks = tokens(10)
    positions = jnp.arange(10, dtype=jnp.int32) * 3
    want = 1.0 + 0.1 * np.log(np.floor((np.asarray(positions) + 1.0) / 4) + 1.0)
    got = np.asarray(scaled.attention_logits(toks, positions), np.float64)
    base = np.asarray(plain.attention_logits(toks, positions), np.float64)
    np.testing.assert_allclose(got, base * want[None, :, None], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window", [None, 3])
def test_scalable_softmax_multiplies_logits_by_s_log_n(window):
    """SSMax: query i's logits (ALiBi bias included) times s_h log(n_i), n_i = min(i + 1, w)
    keys; s starts at 1 / log(L_train)."""
    layers = [] if window is None else [{"window": window}]
    plain = make_model(layered(layers, kind="alibi", depth=1) if layers else _flat("alibi"))
    ssmax_trial = layered(layers, kind="alibi", depth=1, **{"model.scalable_softmax": True})
    ssmax = make_model(ssmax_trial)
    s0 = 1 / math.log(16)
    np.testing.assert_allclose(np.asarray(ssmax.blocks.attn.ssmax), s0, rtol=1e-6)
    s = np.array([0.5, 1.0, 1.5, 2.0])
    ssmax = eqx.tree_at(lambda m: m.blocks.attn.ssmax, ssmax, jnp.asarray(s)[None])
    toks = tokens(9)
    n = np.arange(1, 10, dtype=np.float64)
    n = n if window is None else np.minimum(n, window)
    want = first_layer_logits(plain, toks) * (s[:, None] * np.log(n))[..., None]
    np.testing.assert_allclose(first_layer_logits(ssmax, toks), want, rtol=1e-5, atol=1e-6)


def _flat(kind: str) -> TrialConfig:
    return validate(tiny_trial(kind, width=16, head_dim=4, depth=1))


@pytest.mark.slow  # ~48 s of training
def test_scalable_softmax_s_is_trained_and_counted():
    """s gets gradients through the attention kernel, and the plan counts its H per layer."""
    trial = layered([{"window": 4}, NONE], depth=2, **{"model.scalable_softmax": True})
    model = make_model(trial)
    grads = eqx.filter_grad(lambda m: jnp.sum(jnp.sin(m(tokens(10)))))(model)
    assert np.abs(np.asarray(grads.blocks.attn.ssmax)).min() > 0
    assert estimate_cost(trial)["n_params"] == count_params(model)
    assert param_group(".blocks.attn.ssmax") == "attention_qk"
    toks = jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 24)
    _, own, _ = ntk_against_jacrev(model, toks, lambda p: p.blocks.attn.ssmax)
    assert own.sum() == 2 * 4


def test_plan_counts_a_layer_kinds_own_encoding_parameters():
    trial = layered([{"position": {"kind": "t5_bias"}}, {}], depth=2)
    assert estimate_cost(trial)["n_params"] == count_params(make_model(trial))


def test_eval_scaling_reaches_only_the_layer_kinds_that_ask_for_it():
    """PI at factor 4 divides the frequencies of the kinds with eval_scaling and leaves the
    fixed kind, the NoPE kind and the model-wide (input) encoding as trained."""
    model = make_model(layered([{"window": 4, "eval_scaling": False}, ROPE_1E6, NONE, {}], depth=4))
    scaled = with_scaling(model, "linear", 4.0, seq_len=64)
    inv = lambda m, i: np.asarray(m.encoding_of(i).inv_freq.value)
    np.testing.assert_array_equal(inv(scaled, 0), inv(model, 0))
    np.testing.assert_allclose(inv(scaled, 1), inv(model, 1) / 4, rtol=1e-6)
    np.testing.assert_allclose(inv(scaled, 3), inv(model, 3) / 4, rtol=1e-6)
    assert isinstance(scaled.encoding_of(2), NoPE)
    np.testing.assert_array_equal(
        np.asarray(scaled.position.inv_freq.value), np.asarray(model.position.inv_freq.value)
    )


def test_a_nope_model_with_rope_layers_is_evaluated_under_scalings():
    """supports_scaling follows the layer kinds: NoPE model-wide, RoPE on one kind."""
    trial = layered([{"position": {"kind": "rope"}}, {}], kind="none", depth=2)
    assert trial.model.supports_scaling
    assert not layered(
        [{"position": {"kind": "rope"}, "eval_scaling": False}], kind="none"
    ).model.supports_scaling
    model = make_model(trial)
    scaled = with_scaling(model, "linear", 2.0, seq_len=32)
    np.testing.assert_allclose(
        np.asarray(scaled.encoding_of(0).inv_freq.value),
        np.asarray(model.encoding_of(0).inv_freq.value) / 2,
        rtol=1e-6,
    )


def test_temperature_multiplies_every_layers_logits_bias_included():
    """with_temperature(t): logits x t (ALiBi's bias too); t = log L / log L_train past L_train."""
    model = make_model(_flat("alibi"))
    toks = tokens(8)
    np.testing.assert_allclose(
        first_layer_logits(with_temperature(model, 1.7), toks),
        1.7 * first_layer_logits(model, toks),
        rtol=1e-6,
    )
    assert log_length_temperature(16, 16) == 1.0 and log_length_temperature(8, 16) == 1.0
    assert log_length_temperature(64, 16) == pytest.approx(math.log(64) / math.log(16))


@pytest.mark.slow  # ~40 s of brute-force Jacobians
def test_ntk_of_a_layout_equals_the_brute_force_jacobian():
    """The kernel of a model with a T5-bias layer kind equals jacrev's, and the kind's own table
    (an `embedding`-group parameter) contributes to it."""
    trial = layered([{"position": {"kind": "t5_bias"}, "window": 3}, {}], depth=2)
    model = make_model(trial)
    table = jax.random.normal(jax.random.PRNGKey(5), model.layer_positions[0].table.shape)
    model = eqx.tree_at(lambda m: m.layer_positions[0].table, model, table)
    toks = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 24))
    _, own, _ = ntk_against_jacrev(model, toks, lambda p: p.layer_positions[0].table)
    assert own.sum() == table.size
    assert param_group(".layer_positions[0].table") == "embedding"


def test_layout_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"model.layers: a pattern of 3 kinds does not divide"):
        layered([{}, {}, {}], depth=4)
    with pytest.raises(ConfigError, match=r"model.layers\[1\].position.kind: 'learned' adds"):
        layered([{}, {"position": {"kind": "learned"}}], depth=2)
    with pytest.raises(ConfigError, match=r"model.layers\[0\].window: must be > 0"):
        layered([{"window": 0}], depth=1)
    with pytest.raises(ConfigError, match=r"model.layers\[0\].position: randomized"):
        layered([{"position": {"kind": "rope", "randomized": True}}], depth=1)
    with pytest.raises(ConfigError, match=r"model.layers\[0\].position.rope.scaling"):
        layered([{"position": {"kind": "rope", "rope": {"scaling": "linear", "factor": 2}}}])
    with pytest.raises(ConfigError, match=r"model.layers\[0\].position.rope.theta: must be > 0"):
        layered([{"position": {"kind": "rope", "rope": {"theta": -1}}}], depth=1)
    with pytest.raises(ConfigError, match=r"model.layers\[0\].position.kind: unknown value 'rop'"):
        layered([{"position": {"kind": "rop"}}], depth=1)


def test_layout_ids_round_trip_and_default_ids_are_unchanged():
    """A layout names itself in the trial id and survives to_dict/from_dict; a config without
    the new fields keeps the id it had before they existed."""
    trial = layered([{"window": 8}, {**NONE, "attn_scale": 0.1}], depth=2)
    assert trial.trial_id.startswith("passkey-rope+rope.w8+none.t0.1-w16-d2-")
    assert from_dict(TrialConfig, to_dict(trial)) == trial
    assert TrialConfig().trial_id == "passkey-rope-w128-d2-L64-s0-2d33b89688"
    for key, value in [
        ("model.scalable_softmax", True),
        ("train.pose_target_length", 128),
        ("eval.zero_shot_temperature", True),
    ]:
        assert config_hash(replace(TrialConfig(), **{key: value})) != config_hash(TrialConfig())
    assert ModelConfig().pattern == (LayerConfig(),)
    assert PositionConfig().kind == "rope"


def test_labels_tell_layouts_ssmax_and_pose_apart():
    """Curve labels from the flattened trial configs: a layout, SSMax and PoSE each name
    themselves, so their curves are not pooled with plain RoPE's."""
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.results.columns import flatten_config

    trials = [
        _flat("rope"),
        layered([{"window": 8}, {**NONE, "attn_scale": 0.1}], depth=2),
        layered([{**ROPE_1E6, "eval_scaling": False}], depth=1, **{"model.scalable_softmax": True}),
        validate(replace(_flat("alibi"), **{"train.pose_target_length": 64})),
    ]
    rows = [{**flatten_config(t), "method": "none", "factor": 1.0} for t in trials]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    assert frame.select(label_expr(frame.columns))["label"].to_list() == [
        "rope",
        "rope [rope.w8 | none.t0.1]",
        "rope [rope1e+06.fixed] +SSMax",
        "alibi +PoSE 64",
    ]


def test_a_layout_with_scalable_softmax_trains_without_retracing():
    """Three optimiser steps compile the step once (a weakly typed s would retrace it after the
    first update) and move s."""
    from rope_lab.trial.train import train

    trial = layered(
        [{"window": 4}, {**NONE, "attn_scale": 0.1, "floor_scale": 4}],
        depth=2,
        **{"model.scalable_softmax": True, "train.steps": 3},
    )
    start = make_model(trial)
    result = train(trial, model=start)
    moved = np.abs(np.asarray(result.model.blocks.attn.ssmax - start.blocks.attn.ssmax))
    assert moved.min() > 0

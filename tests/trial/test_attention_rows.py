"""Attention statistics (`eval.attention_stats`): each column against its closed form on
hand-set weights, the sequences averaged over, the memory cap, and the rows `evaluate_model`
writes next to the teacher-forced ones."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest

from rope_lab.analysis import query as q
from rope_lab.analysis.plots import plot
from rope_lab.analysis.query import QueryError
from rope_lab.config import replace, validate
from rope_lab.model.attention_stats import layer_statistics
from rope_lab.model.factory import make_model
from rope_lab.tasks import Batch, task_from_config
from rope_lab.trial.attention_rows import (
    ATTENTION,
    attention_rows,
    reference_sequences,
)
from rope_lab.trial.evaluate import evaluate_model, scalings_for
from tests.helpers import tiny_trial

HEADS = 4


def _model(fn: str, depth: int = 1, **changes):
    cfg = validate(
        replace(tiny_trial("rope", depth=depth), **{"model.attention_fn": fn, **changes})
    )
    return cfg, make_model(cfg, key=jax.random.PRNGKey(3))


def _zero_queries(model):
    """Every logit 0: queries are zero (RoPE rotates zero to zero)."""
    return eqx.tree_at(lambda m: m.blocks.attn.q.weight, model, replace_fn=jnp.zeros_like)


def _inputs(length: int, batch: int = 2, seed: int = 0):
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (batch, length), 0, 24)
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    return tokens, positions


def test_first_token_mass_of_uniform_attention_is_the_mean_of_one_over_i_plus_one():
    # 130 tokens: two query blocks of the reference path; two layers, each its own row
    length = 130
    _, model = _model("softmax", depth=2)
    stats = layer_statistics(_zero_queries(model), *_inputs(length))
    expected = np.mean([1.0 / (i + 1) for i in range(1, length)])
    assert set(stats) == {"first_token_mass"}
    assert stats["first_token_mass"].shape == (2, 2, HEADS)
    np.testing.assert_allclose(stats["first_token_mass"], expected, rtol=1e-5)


def test_sink_mass_of_a_known_sink_logit():
    length = 20
    _, model = _model("sinks")
    sinks = jnp.array([[-1.0, 0.0, 1.0, 2.5]])  # (depth, H)
    model = eqx.tree_at(lambda m: m.blocks.attn.variant.params, _zero_queries(model), sinks)
    stats = layer_statistics(model, *_inputs(length))
    e = np.exp(np.asarray(sinks[0], np.float64))[:, None]
    rows = np.arange(1, length)[None, :] + 1.0  # keys seen by queries i >= 1
    np.testing.assert_allclose(stats["sink_mass"][0, 0], (e / (e + rows)).mean(1), rtol=1e-5)
    np.testing.assert_allclose(
        stats["first_token_mass"][0, 1], (1.0 / (e + rows)).mean(1), rtol=1e-5
    )


def test_gate_mean_and_fox_window_rows_of_hand_set_gates():
    # fox_pro: an element-wise output gate and a forget gate; zero weights, forget biases b_h
    cfg, model = _model("fox_pro", depth=2)
    biases = jnp.array([[-1.0, 0.0, 1.0, 3.0], [0.5, 0.5, 2.0, 2.0]])
    model = eqx.tree_at(lambda m: m.blocks.attn.gate.weight, model, replace_fn=jnp.zeros_like)
    model = eqx.tree_at(lambda m: m.blocks.attn.forget.weight, model, replace_fn=jnp.zeros_like)
    model = eqx.tree_at(lambda m: m.blocks.attn.forget.bias, model, biases)
    tokens, positions = _inputs(16)
    batch = Batch(tokens=tokens, targets=tokens, mask=jnp.ones_like(tokens, bool))
    rows = attention_rows(model, [(batch, positions)], cfg, 16, {"step": 7})
    assert len(rows) == 2 * (HEADS + 1)
    windows = -1.0 / np.log(1.0 / (1.0 + np.exp(-np.asarray(biases, np.float64))))
    for layer in range(2):
        whole, *heads = [r for r in rows if r["layer"] == layer]
        assert whole["head"] is None and [r["head"] for r in heads] == list(range(HEADS))
        assert whole["mode"] == ATTENTION and whole["step"] == 7 and whole["length"] == 16
        assert whole["sink_mass"] is None
        np.testing.assert_allclose([r["fox_window"] for r in heads], windows[layer], rtol=1e-5)
        np.testing.assert_allclose(whole["fox_window"], np.median(windows[layer]), rtol=1e-5)
        assert [r["gate_mean"] for r in heads] == [0.5] * HEADS
        assert whole["gate_mean"] == 0.5


def test_gate_mean_of_a_head_wise_zero_gate_is_one_half():
    _, model = _model("gated_head")
    model = eqx.tree_at(lambda m: m.blocks.attn.gate.weight, model, replace_fn=jnp.zeros_like)
    stats = layer_statistics(model, *_inputs(12))
    assert set(stats) == {"first_token_mass", "gate_mean"}
    np.testing.assert_array_equal(stats["gate_mean"], 0.5)


def test_sequences_without_a_scored_token_are_left_out_and_the_batch_is_split():
    cfg, model = _model("sinks", **{"eval.batch_size": 2})
    tokens, positions = _inputs(12, batch=4, seed=1)
    mask = jnp.ones_like(tokens, bool).at[1].set(False).at[3].set(False)
    both = Batch(tokens=tokens, targets=tokens, mask=mask)
    rows = attention_rows(model, [(both, positions)], cfg, 12, {})
    real = jnp.array([0, 2])
    alone = Batch(tokens=tokens[real], targets=tokens[real], mask=mask[real])
    expected = attention_rows(model, [(alone, positions[real])], cfg, 12, {})
    assert reference_sequences(cfg, 12) == 2  # two sub-batches of two sequences
    for got, want in zip(rows, expected, strict=True):
        assert got.keys() == want.keys()
        for name in ("first_token_mass", "sink_mass"):
            assert got[name] == pytest.approx(want[name], rel=1e-6)
    # each sequence differs: leaving sequence 1 in would move the mean
    unmasked = Batch(tokens=tokens, targets=tokens, mask=jnp.ones_like(tokens, bool))
    moved = attention_rows(model, [(unmasked, positions)], cfg, 12, {})
    assert moved[0]["first_token_mass"] != pytest.approx(rows[0]["first_token_mass"], rel=1e-6)


def test_a_length_whose_reference_forward_exceeds_the_budget_gets_no_rows():
    cfg, model = _model("sinks", **{"eval.memory_budget_mb": 1e-3})
    tokens, positions = _inputs(12)
    batch = Batch(tokens=tokens, targets=tokens, mask=jnp.ones_like(tokens, bool))
    assert reference_sequences(cfg, 12) == 0
    assert attention_rows(model, [(batch, positions)], cfg, 12, {}) == []


def test_evaluate_model_adds_attention_rows_and_leaves_the_others_unchanged():
    cfg, model = _model("sinks", **{"eval.attention_stats": True})
    task = task_from_config(cfg.task)
    scalings = scalings_for(cfg)[:1]
    rows = evaluate_model(model, task, cfg, step=0, scalings=scalings, lengths=[8, 16])
    off = replace(cfg, **{"eval.attention_stats": False})
    plain = evaluate_model(model, task, off, step=0, scalings=scalings, lengths=[8, 16])
    assert [r for r in rows if r.get("mode") != ATTENTION] == plain
    attention = [r for r in rows if r.get("mode") == ATTENTION]
    assert [(r["length"], r["head"]) for r in attention if r["layer"] == 0][:2] == [
        (8, None),
        (8, 0),
    ]
    assert len(attention) == 2 * (HEADS + 1)
    for r in attention:
        assert 0.0 < r["first_token_mass"] < 1.0 and 0.0 < r["sink_mass"] < 1.0
        assert r["gate_mean"] is None and r["fox_window"] is None


def test_attention_mass_plot_refuses_runs_without_attention_rows():
    frame = pl.DataFrame({"mode": [None], "head": [None], "length": [8]})
    with pytest.raises(QueryError, match=r"eval\.attention_stats: true"):
        plot("attention_mass", frame)
    with pytest.raises(QueryError, match="unknown metric 'loss'"):
        plot("attention_mass", frame, metric="loss")
    assert "attention" in q.EVAL_MODES

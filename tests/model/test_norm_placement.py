"""`model.norm_placement: post` (x + norm(f(x))) and `model.qk_norm_scope: projection` (QK-norm
over all heads at once), OLMo 2's block: invariances that tell them from the pre-norm,
per-head forms, cached decoding, and the planned parameter count."""

from __future__ import annotations

import equinox as eqx
import numpy as np
import pytest

from rope_lab.model.decode import generate
from rope_lab.model.transformer import count_params
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.train import make_model
from rope_lab.typed import ConfigError
from tests.model.test_pretrained_arch import _randomise, _tokens, _trial, forward

RMS = {"model.norm": "rmsnorm", "model.mlp": "swiglu", "model.norm_eps": 1e-9}
POST = {**RMS, "model.norm_placement": "post"}
WHOLE = {**RMS, "model.qk_norm": True, "model.qk_norm_scope": "projection"}


def _scaled(model, where, factor):
    return eqx.tree_at(where, model, factor * where(model))


@pytest.mark.parametrize(("changes", "invariant"), [(POST, True), (RMS, False)])
def test_a_post_norm_undoes_the_scale_of_each_sublayers_output(changes, invariant):
    """Post-norm: x + norm(attn(x)), so scaling the output projection (or the MLP's down
    projection) leaves the logits unchanged; pre-norm adds the scaled output."""
    model = _randomise(make_model(_trial(**changes)))
    tokens = _tokens()
    for where in (lambda m: m.blocks.attn.o.weight, lambda m: m.blocks.mlp.down.weight):
        scaled = _scaled(model, where, 5.0)
        same = np.allclose(forward(model, tokens), forward(scaled, tokens), rtol=1e-4, atol=1e-4)
        assert same is invariant


def test_post_norm_decoding_with_a_cache_equals_the_forward():
    model = _randomise(make_model(_trial(**POST)))
    prompt = _tokens(6)
    tokens, logits = generate(model, prompt, 8, 32)
    want = forward(model, np.concatenate([prompt, tokens[:-1]]))[5:]
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("scope", "invariant"), [("projection", False), ("head", True)])
def test_projection_qk_norm_shares_one_rms_across_heads(scope, invariant):
    """Scaling one head's query rows: a per-head norm undoes it, a norm over the whole
    projection does not (the other heads' share of the RMS stays); scaling every head alike
    both undo."""
    model = _randomise(make_model(_trial(**{**WHOLE, "model.qk_norm_scope": scope})))
    tokens = _tokens()
    q = model.blocks.attn.q.weight  # (depth, heads x head_dim, width), head_dim 8
    one_head = eqx.tree_at(lambda m: m.blocks.attn.q.weight, model, q.at[:, :8].multiply(6.0))
    same = np.allclose(forward(model, tokens), forward(one_head, tokens), rtol=1e-4, atol=1e-4)
    assert same is invariant
    every = _scaled(model, lambda m: m.blocks.attn.q.weight, 6.0)
    np.testing.assert_allclose(forward(every, tokens), forward(model, tokens), rtol=1e-4, atol=1e-4)


def test_projection_qk_norm_weights_span_the_projection_and_are_counted():
    trial = _trial(**{**WHOLE, **POST, "model.kv_heads": 2})
    model = make_model(trial)
    assert model.blocks.attn.q_norm.weight.shape == (2, 32)  # 4 heads x 8
    assert model.blocks.attn.k_norm.weight.shape == (2, 16)  # 2 kv heads x 8
    assert estimate_cost(trial)["n_params"] == count_params(model)


def test_projection_scope_without_qk_norm_is_refused():
    with pytest.raises(
        ConfigError, match=r"model.qk_norm_scope: 'projection' needs model.qk_norm: true"
    ):
        _trial(**{**RMS, "model.qk_norm_scope": "projection"})

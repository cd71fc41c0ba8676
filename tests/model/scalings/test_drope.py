"""DroPE (`eval.methods: [drope]`): a RoPE model with its rotation dropped is the NoPE model on
the same weights, evaluated at factor 1 whatever the factors, and recalibrated at L_train."""

from __future__ import annotations

import jax
import numpy as np

from rope_lab.config import replace, validate
from rope_lab.model import rope
from rope_lab.model.factory import make_model
from rope_lab.sweep.plan import finetune_runs
from rope_lab.trial import finetune
from rope_lab.trial.evaluate import model_at_length
from rope_lab.trial.scaling_plan import Scaling, finetune_length, finetune_scalings, scalings_for
from tests.helpers import tiny_trial


def _trial(kind: str = "rope", **changes):
    base = tiny_trial(kind, depth=2)
    changes = {"eval.methods": ("drope", "linear"), "eval.factors": (2.0, 4.0), **changes}
    return validate(replace(base, **changes))


def test_every_frequency_is_zero_at_any_factor():
    for factor in (1.0, 4.0):
        inv, attention_factor = rope.inv_freq("drope", 8, factor=factor, original_length=16)
        np.testing.assert_array_equal(inv, np.zeros(4, np.float32))
        assert attention_factor == 1.0


def test_a_dropped_rope_model_is_the_nope_model_on_the_same_weights():
    cfg, nope_cfg = _trial(), _trial("none")
    model, nope = make_model(cfg), make_model(nope_cfg)
    weights = lambda m: jax.tree.leaves((m.embedding, m.blocks, m.final_norm, m.head))
    for a, b in zip(weights(model), weights(nope), strict=True):
        np.testing.assert_array_equal(a, b)  # the same weights: RoPE has only its frequencies
    tokens = jax.random.randint(jax.random.PRNGKey(0), (24,), 0, cfg.task.vocab_size)
    dropped = model_at_length(model, cfg, Scaling("drope", 1.0), 24)
    np.testing.assert_allclose(dropped(tokens), nope(tokens), rtol=1e-5, atol=1e-5)
    assert not np.allclose(model(tokens), nope(tokens), atol=1e-3)  # RoPE did rotate


def test_one_stage_at_factor_one_recalibrated_at_the_training_length(monkeypatch):
    cfg = _trial(**{"eval.finetune_steps": 3})
    stages = scalings_for(cfg)[1:]
    assert [s for s in stages if s.method == "drope"] == [Scaling("drope", 1.0)]
    assert [s.factor for s in stages if s.method == "linear"] == [2.0, 4.0]
    lengths = {(s.method, s.factor): finetune_length(cfg, s) for s in finetune_scalings(cfg)}
    assert lengths == {("drope", 1.0): 16, ("linear", 2.0): 32, ("linear", 4.0): 64}
    assert sorted(finetune_runs(cfg)) == [(16, 1), (32, 1), (64, 1)]
    trained = []

    def fake_train(cfg, *, model, length, **kw):
        trained.append(length)
        return type("Trained", (), {"model": model})()

    monkeypatch.setattr(finetune, "train", fake_train)
    monkeypatch.setattr(finetune, "evaluate_model", lambda *a, **k: [])
    finetune.finetune_and_evaluate(make_model(cfg), None, cfg, step=0)
    assert trained == [16, 32, 64]


def test_drope_rows_are_labelled_by_their_method():
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.results.columns import flatten_config

    cfg = _trial()
    row = pl.DataFrame([{**flatten_config(cfg), "method": "drope", "factor": 1.0}])
    assert row.select(label_expr(row.columns))["label"].item() == "rope/drope x1"

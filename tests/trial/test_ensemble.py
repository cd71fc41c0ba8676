"""Seed ensembles: each member is the single-seed run it stands for, in one compiled program."""

import equinox as eqx
import jax
import numpy as np
import pytest

from rope_lab.config import replace
from rope_lab.model.factory import make_model
from rope_lab.trial.ensemble import init_ensemble, train_ensemble, unstack
from rope_lab.trial.train import train
from tests.helpers import tiny_trial

SEEDS = (3, 11)


def _arrays(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def test_stacked_init_is_each_seeds_make_model():
    cfg = tiny_trial("learned", width=32, depth=2)  # learned: a random position table too
    stacked = init_ensemble(cfg, SEEDS)
    assert stacked.embedding.shape == (2, cfg.task.vocab_size, 32)
    for i, seed in enumerate(SEEDS):
        single = make_model(replace(cfg, **{"train.seed": seed}))
        for a, b in zip(_arrays(unstack(stacked, i)), _arrays(single), strict=True):
            np.testing.assert_array_equal(a, b)  # vmapped PRNG draws are the same bits


def test_ensemble_loss_curves_match_single_seed_runs():
    cfg = replace(tiny_trial("rope", width=32, depth=2, steps=20), **{"train.log_every": 1})
    members = train_ensemble(cfg, SEEDS)
    assert len(members) == 2
    curves = []
    for member, seed in zip(members, SEEDS, strict=True):
        single = train(replace(cfg, **{"train.seed": seed}))
        assert member.steps_done == single.steps_done == 20
        assert member.tokens_seen == single.tokens_seen
        assert not member.diverged and member.traces == 1
        assert [r["step"] for r in member.history] == [r["step"] for r in single.history]
        loss = [r["loss"] for r in member.history]
        np.testing.assert_allclose(loss, [r["loss"] for r in single.history], rtol=1e-4)
        np.testing.assert_allclose(
            [r["lr"] for r in member.history], [r["lr"] for r in single.history], rtol=1e-6
        )
        for a, b in zip(_arrays(member.model), _arrays(single.model), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
        curves.append(loss)
    assert curves[0] != curves[1]  # the seeds really differ


def test_divergence_is_flagged_per_seed():
    cfg = replace(tiny_trial("rope", steps=30), **{"train.lr": 1e30, "train.clip_norm": 1e30})
    members = train_ensemble(cfg, SEEDS)
    for m in members:
        assert m.diverged and m.steps_done < 30
        assert not np.isfinite(m.history[-1]["loss"])
        assert m.history[-1]["step"] == m.steps_done


def test_no_seeds_is_an_error():
    with pytest.raises(ValueError, match="seeds: need at least one seed"):
        train_ensemble(tiny_trial(), [])

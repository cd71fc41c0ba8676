"""Seed ensembles: each member is the single-seed run it stands for, in one compiled program."""

import equinox as eqx
import jax
import numpy as np
import pytest

from rope_lab.config import replace
from rope_lab.hooks import Hook
from rope_lab.model.factory import make_model
from rope_lab.trial.ensemble import (
    host_batches,
    init_ensemble,
    train_ensemble,
    train_packed,
    unstack,
)
from rope_lab.trial.train import train
from tests.helpers import recorded_token_windows, tiny_trial

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


@pytest.mark.slow  # ~18 s; the packed sweep tests cover the pipeline
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


def _recorder(calls: list, states: dict | None = None):
    """A hook body recording (step, rows seen, first embedding value) and keeping the state."""

    def fn(state):
        first = float(np.asarray(state.model.embedding)[0, 0])
        calls.append((state.step, len(state.history), first))
        if states is not None:
            states[state.step] = (state.model, state.opt_state)

    return fn


def _hooks(calls: list, states: dict | None = None) -> list[Hook]:
    return [
        Hook(every=4, fn=_recorder(calls, states), at_start=True),
        Hook(every=1, fn=_recorder(calls), steps=frozenset({0, 5, 12}), at_start=True),
    ]


@pytest.mark.slow  # four training runs, two compilations: ~30 s of CPU
def test_packed_members_resume_and_see_their_own_hooks_as_alone():
    """`train_packed` from a mid-run state with per-member hooks: each member's hooks run at the
    steps `train` runs them, with its own model and history, and the members end where
    `train` ends each trial."""
    cfg = replace(tiny_trial("rope", steps=12), **{"train.log_every": 2})
    cfgs = [replace(cfg, **{"train.seed": s}) for s in SEEDS]
    alone = []
    for c in cfgs:
        calls: list = []
        result = train(c, hooks=_hooks(calls))
        alone.append((calls, result))

    first_calls: list[list] = [[], []]
    states: list[dict] = [{}, {}]
    train_packed(cfgs, hooks=[_hooks(first_calls[i], states[i]) for i in range(2)], steps=12)
    for (calls, _), own in zip(alone, first_calls, strict=True):
        assert [c[:2] for c in own] == [c[:2] for c in calls]
        np.testing.assert_allclose([c[2] for c in own], [c[2] for c in calls], rtol=1e-5)

    resumed_calls: list[list] = [[], []]
    resumed = train_packed(
        cfgs,
        models=[states[i][4][0] for i in range(2)],
        opt_states=[states[i][4][1] for i in range(2)],
        start_step=4,
        hooks=[_hooks(resumed_calls[i]) for i in range(2)],
    )
    for (calls, single), own, member in zip(alone, resumed_calls, resumed, strict=True):
        # after step 4: every 4 (8, 12), the step set (5, 12); rows of this run only
        assert [c[0] for c in own] == [c[0] for c in calls if c[0] > 4] == [5, 8, 12, 12]
        assert [c[1] for c in own] == [0, 2, 4, 4]
        np.testing.assert_allclose(
            [c[2] for c in own], [c[2] for c in calls if c[0] > 4], rtol=1e-5
        )
        assert member.steps_done == 12 and [r["step"] for r in member.history] == [6, 8, 10, 12]
        np.testing.assert_allclose(
            [r["loss"] for r in member.history],
            [r["loss"] for r in single.history if r["step"] > 4],
            rtol=1e-4,
        )
        for a, b in zip(_arrays(member.model), _arrays(single.model), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
        for a, b in zip(_arrays(member.opt_state), _arrays(single.opt_state), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_a_pack_refuses_trials_that_differ_beyond_their_seeds():
    cfg = tiny_trial("rope")
    with pytest.raises(ValueError, match=r"cannot train as one pack: .* train\.lr"):
        train_packed([cfg, replace(cfg, **{"train.seed": 1, "train.lr": 1e-2})])


def test_host_batches_stack_each_seeds_own_windows_of_the_step(tmp_path):
    from rope_lab.corpus.prepare import write_ids
    from rope_lab.tasks import make_task

    path = write_ids(tmp_path / "c", np.arange(500) % 256, np.arange(50))
    task = make_task("lm_tokens", 256, path=str(path))
    (stacked,) = host_batches(task, SEEDS, 4, 8, step=7)
    assert stacked.shape == (2, 4, 9)
    for i, seed in enumerate(SEEDS):
        (own,) = task.host_batch(4, 8, seed=seed, step=7)
        np.testing.assert_array_equal(np.asarray(stacked[i]), own)
    assert not np.array_equal(stacked[0], stacked[1])


@pytest.mark.slow  # three compilations: ~25 s on a loaded 2-core CPU
def test_a_host_fed_pack_reads_each_members_windows_and_trains_each_as_alone(tmp_path):
    """`lm_tokens` on a tiny corpus: each packed member's windows of step s are those `train`
    gathers for its seed (`host_batch(B, L, seed, s)`, once per member and step, in member
    order), and its loss rows and final model are those of the trial trained alone."""
    from rope_lab.corpus.prepare import write_ids

    ids = np.random.default_rng(0).integers(0, 256, 3000)
    path = write_ids(tmp_path / "c", ids, np.arange(300) % 256)
    cfg = replace(
        tiny_trial("rope", task="lm_tokens", vocab=256, task_params=(("path", str(path)),)),
        **{"train.steps": 4, "train.log_every": 1},
    )
    cfgs = [replace(cfg, **{"train.seed": s}) for s in SEEDS]
    with recorded_token_windows() as read:
        members = train_packed(cfgs)
        packed_reads = list(read)
        read.clear()
        alone = [train(c) for c in cfgs]
    assert [r[:2] for r in packed_reads] == [(s, t) for t in range(4) for s in SEEDS]
    by_seed_step = {(s, t): w for s, t, w in read}
    assert len(by_seed_step) == len(read) == 8
    for s, t, windows in packed_reads:
        np.testing.assert_array_equal(windows, by_seed_step[s, t])
    for member, single in zip(members, alone, strict=True):
        assert member.traces == 1 and member.steps_done == single.steps_done == 4
        assert [r["step"] for r in member.history] == [r["step"] for r in single.history]
        np.testing.assert_allclose(
            [r["loss"] for r in member.history], [r["loss"] for r in single.history], rtol=1e-5
        )
        for a, b in zip(_arrays(member.model), _arrays(single.model), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert members[0].history[0]["loss"] != members[1].history[0]["loss"]

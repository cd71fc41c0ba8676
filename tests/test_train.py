"""Training: it learns, it never retraces, it resumes bit-exactly, it flags divergence."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import replace
from rope_lab.train import Hook, TraceGuard, lr_schedule, train
from tests.helpers import tiny_trial


def test_tiny_model_learns_tiny_passkey():
    """Loss on the needle answer falls by at least 3x within 150 steps (a few seconds)."""
    cfg = replace(
        tiny_trial("rope", width=32, depth=2, steps=150),
        **{"train.lr": 1e-2, "train.warmup_steps": 10},
    )
    result = train(cfg)
    losses = [row["loss"] for row in result.history]
    assert not result.diverged
    assert result.steps_done == 150 and result.tokens_seen == 150 * 8 * 16
    assert losses[0] / np.mean(losses[-2:]) > 3.0, losses
    assert result.traces == 1


def test_resume_is_bit_exact():
    cfg = tiny_trial("alibi", steps=10)
    full = train(cfg)

    class Crash(Exception):
        pass

    saved = {}

    def crash_at_six(state):
        saved["model"], saved["opt"] = state.model, state.opt_state
        raise Crash

    with pytest.raises(Crash):
        train(cfg, hooks=[Hook(every=6, fn=crash_at_six, at_end=False)])
    resumed = train(cfg, model=saved["model"], opt_state=saved["opt"], start_step=6)
    for a, b in zip(
        jax.tree.leaves(eqx.filter(full.model, eqx.is_array)),
        jax.tree.leaves(eqx.filter(resumed.model, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_divergence_stops_and_is_flagged():
    cfg = replace(tiny_trial("rope", steps=50), **{"train.lr": 1e30, "train.clip_norm": 1e30})
    result = train(cfg)
    assert result.diverged
    assert result.steps_done < 50
    assert not np.isfinite(result.history[-1]["loss"])


def test_hooks_run_at_their_steps_and_at_end():
    seen = []
    cfg = tiny_trial("none", steps=7)
    train(cfg, hooks=[Hook(every=3, fn=lambda s: seen.append(s.step), at_start=True)])
    assert seen == [0, 3, 6, 7]


def test_train_does_not_consume_the_callers_model():
    cfg = tiny_trial("rope", steps=2)
    first = train(cfg)
    train(cfg, model=first.model)
    assert bool(jnp.all(jnp.isfinite(first.model.embedding)))  # not deleted by donation


def test_trace_guard_raises_on_retrace():
    guard = TraceGuard("f")
    guard.hit()
    guard.check()
    guard.hit()
    with pytest.raises(RuntimeError, match="f retraced 2 times"):
        guard.check()


def test_schedule_warmup_and_cosine():
    cfg = tiny_trial(steps=100, lr=1e-3).train
    sched = lr_schedule(cfg)
    assert float(sched(0)) == 0.0
    assert float(sched(2)) == pytest.approx(1e-3)
    assert float(sched(100)) == pytest.approx(1e-4)


@pytest.mark.parametrize("kind", ["rope", "learned"])
def test_randomized_positions_train_and_evaluate(kind):
    from rope_lab.config import validate
    from rope_lab.evaluate import evaluate_model
    from rope_lab.train import batch_positions, make_task_from

    cfg = replace(
        tiny_trial(kind, steps=5),
        **{"model.position.randomized": True, "model.position.random_max_length": 128},
    )
    validate(cfg)
    assert cfg.max_length == 128  # the learned table covers the whole random range
    pos = batch_positions(cfg, jax.random.PRNGKey(0), 4, 16)
    assert pos.shape == (4, 16) and int(pos.max()) < 128
    assert bool(jnp.all(jnp.diff(pos, axis=1) > 0)) and int(pos[:, -1].max()) > 16
    result = train(cfg)
    assert not result.diverged
    rows = evaluate_model(result.model, make_task_from(cfg), cfg, step=5)
    assert all(np.isfinite(r["loss"]) for r in rows if r["position_bucket"] is None)

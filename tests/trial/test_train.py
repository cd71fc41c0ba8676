"""Training: it learns, it never retraces, it resumes bit-exactly, it flags divergence."""

import math
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rope_lab.config import TrainConfig, replace
from rope_lab.hooks import Hook
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import trainable
from rope_lab.trial.optimizer import lr_schedule, make_optimizer
from rope_lab.trial.train import TraceGuard, train
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
    # each logged row carries the lr of its update: update s (1-based) ran at schedule(s - 1)
    tc = cfg.train
    logged = [(row["step"], row["lr"]) for row in result.history]
    assert [s for s, _ in logged] == list(range(5, 151, 5))
    for s, lr in logged:
        assert lr == pytest.approx(_closed_form_lr(s - 1, 150, 10, tc.lr, tc.min_lr_ratio))


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


MAX_STEPS = 300


def _closed_form_lr(step, steps, warmup, peak, ratio):
    """The documented schedule at `step`: linear from 0 at step 0 to `peak` at `warmup`, then a
    half cosine from `peak` to peak x ratio, reached at `steps`."""
    if step < warmup:
        return peak * step / warmup
    end = peak * ratio
    return end + (peak - end) * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup))) / 2


def _assert_schedule(sched, steps, warmup, peak, ratio):
    """`sched` equals the closed form at every step 0..steps, peak at `warmup`, end at `steps`."""
    got = np.asarray(sched(jnp.arange(MAX_STEPS + 1)), np.float64)[: steps + 1]  # one shape
    want = [_closed_form_lr(t, steps, warmup, peak, ratio) for t in range(steps + 1)]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=peak * 1e-7)
    assert got[warmup] == pytest.approx(peak, rel=1e-6)
    assert got[steps] == pytest.approx(peak * ratio, rel=1e-6, abs=peak * 1e-7)
    assert got[0] == (0.0 if warmup else pytest.approx(peak, rel=1e-6))


@st.composite
def _schedules(draw):
    steps = draw(st.integers(1, MAX_STEPS))
    return {
        "steps": steps,
        "warmup_steps": draw(st.integers(0, steps - 1)),
        "lr": draw(st.floats(1e-5, 1e-1)),
        "min_lr_ratio": draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]) | st.floats(0.0, 1.0)),
    }


@given(fields=_schedules(), override=st.none() | st.floats(1e-5, 1e-1))
@example(fields={"steps": 100, "warmup_steps": 2, "lr": 1e-3, "min_lr_ratio": 0.1}, override=None)
@example(fields={"steps": 1, "warmup_steps": 0, "lr": 1e-3, "min_lr_ratio": 0.1}, override=None)
@example(fields={"steps": 2, "warmup_steps": 1, "lr": 1e-3, "min_lr_ratio": 0.0}, override=2e-3)
def test_schedule_is_warmup_then_cosine_at_every_step(fields, override):
    cfg = TrainConfig(**fields)
    peak = cfg.lr if override is None else override
    sched = lr_schedule(cfg, override)
    _assert_schedule(sched, cfg.steps, cfg.warmup_steps, peak, cfg.min_lr_ratio)


@pytest.mark.parametrize(("steps", "warmup_steps"), [(5, 5), (5, 9), (1, 3)])
def test_schedule_warmup_longer_than_the_run_peaks_at_the_second_last_step(steps, warmup_steps):
    cfg = TrainConfig(steps=steps, warmup_steps=warmup_steps, lr=1e-3, min_lr_ratio=0.1)
    _assert_schedule(lr_schedule(cfg), steps, steps - 1, 1e-3, 0.1)


LINEAR_WEIGHT = re.compile(r"\.(q|k|v|o|up|down|gate|head)\.weight$")


def test_optimizer_update_is_clipped_adam_with_decay_mup_and_the_schedule():
    """With the same gradient g at every step, Adam's bias-corrected moments are g and g^2, so
    update t is -lr(t) m (c / (|c| + eps) + wd p [Linear weight]), with c = g clipped to global
    norm clip_norm and m the muP multiplier base_width / width on Linear weights (1 elsewhere)."""
    cfg = replace(
        tiny_trial("rope", steps=6, weight_decay=0.1),
        **{"model.parametrization": "mup", "model.base_width": 8, "train.warmup_steps": 3},
    )
    tc = cfg.train
    model = make_model(cfg)
    params = eqx.filter(model, trainable(model))
    named = jax.tree_util.tree_leaves_with_path(params)
    rng = np.random.default_rng(0)
    grads_np = [rng.normal(scale=0.1, size=leaf.shape).astype(np.float32) for _, leaf in named]
    grads = jax.tree.unflatten(jax.tree.structure(params), [jnp.asarray(g) for g in grads_np])
    norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads_np))
    assert norm > tc.clip_norm  # clipping is active
    clipped = [g.astype(np.float64) * tc.clip_norm / norm for g in grads_np]
    is_linear = [bool(LINEAR_WEIGHT.search(jax.tree_util.keystr(path))) for path, _ in named]
    assert sum(is_linear) == 7  # q, k, v, o, up, down, head
    mult = [8 / 32 if lin else 1.0 for lin in is_linear]

    optimizer = make_optimizer(tc, model)
    state = optimizer.init(params)
    update = eqx.filter_jit(optimizer.update)
    for t in range(tc.steps + 1):
        updates, state = update(grads, state, params)
        lr = _closed_form_lr(t, tc.steps, tc.warmup_steps, tc.lr, tc.min_lr_ratio)
        for (path, p), u, c, m, lin in zip(
            named, jax.tree.leaves(updates), clipped, mult, is_linear, strict=True
        ):
            direction = c / (np.abs(c) + tc.eps) + tc.weight_decay * np.asarray(p) * lin
            want = -lr * m * direction
            np.testing.assert_allclose(
                np.asarray(u), want, rtol=1e-4, atol=1e-9, err_msg=f"step {t} {path}"
            )


@pytest.mark.parametrize("kind", ["rope", pytest.param("learned", marks=pytest.mark.slow)])
def test_randomized_positions_train_and_evaluate(kind):
    from rope_lab.config import validate
    from rope_lab.model.positions.modules import batch_positions
    from rope_lab.tasks import task_from_config
    from rope_lab.trial.evaluate import evaluate_model

    cfg = replace(
        tiny_trial(kind, steps=5),
        **{"model.position.randomized": True, "model.position.random_max_length": 128},
    )
    validate(cfg)
    assert cfg.max_length == 128  # the learned table covers the whole random range
    pos = batch_positions(cfg, key=jax.random.PRNGKey(0), batch_size=4, length=16)
    assert pos.shape == (4, 16) and int(pos.max()) < 128
    assert bool(jnp.all(jnp.diff(pos, axis=1) > 0)) and int(pos[:, -1].max()) > 16
    result = train(cfg)
    assert not result.diverged
    rows = evaluate_model(result.model, task_from_config(cfg.task), cfg, step=5)
    assert all(np.isfinite(r["loss"]) for r in rows if r["position_bucket"] is None)


def test_factories_stay_importable_from_train_under_their_old_names():
    from rope_lab import tasks
    from rope_lab.model import factory as model_factory
    from rope_lab.model.positions import modules as positions
    from rope_lab.trial import objective
    from rope_lab.trial import train as train_module

    assert train_module.make_model is model_factory.make_model
    assert train_module.token_losses is objective.token_losses
    assert train_module.masked_loss is objective.masked_loss
    assert train_module.batch_positions is positions.batch_positions
    cfg = tiny_trial("rope")
    assert train_module.make_task_from(cfg) == tasks.task_from_config(cfg.task)

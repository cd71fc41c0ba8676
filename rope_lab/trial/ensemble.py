"""Seed ensembles: k seeds of one trial config trained as a single vmapped program.

Every array of the model and optimiser state gets a leading seed axis (k, ...). Seed s is
initialised from `fold_in(PRNGKey(s), 0)` and draws the batch of step t from
`fold_in(fold_in(PRNGKey(s), 1), t)`, exactly as `rope_lab.trial.train.train` does for a config
with `train.seed = s`, so seed s of the ensemble follows the single-seed run up to float
reordering in the batched matmuls. One jitted step updates all k seeds; it is compiled once
per (config, k). The ensemble runs on the default device (`train.devices` is not used).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, PRNGKeyArray

from rope_lab.config import TrainConfig, TrialConfig
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import Transformer, trainable
from rope_lab.tasks import Task, task_from_config
from rope_lab.trial.train import (
    TraceGuard,
    TrainResult,
    lr_schedule,
    make_optimizer,
    train_step_body,
)


class EnsembleInputs(NamedTuple):
    """The step's non-donated inputs.

    static: non-trainable model part, arrays stacked (k, ...); data_keys: (k, 2) per-seed data
    keys; step: () int32 index of the step being taken (0-based); operands: the task's arrays.
    """

    static: Any
    data_keys: Array
    step: Array
    operands: tuple


def seed_keys(seeds: Sequence[int], stream: int) -> PRNGKeyArray:
    """(k, 2) keys `fold_in(PRNGKey(seed), stream)`: stream 0 initialises, stream 1 is data."""
    return jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), stream) for s in seeds])


def init_ensemble(cfg: TrialConfig, seeds: Sequence[int]) -> Transformer:
    """The k models of `seeds` stacked into one: every array leaf has shape (k, ...).

    Slice i equals `make_model(cfg with train.seed = seeds[i])`.
    """
    if not seeds:
        raise ValueError("seeds: need at least one seed")
    return eqx.filter_vmap(lambda key: make_model(cfg, key=key))(seed_keys(seeds, 0))


def unstack(tree: Any, i: int) -> Any:
    """Member i of a stacked pytree: every array leaf (k, ...) -> (...); other leaves as is."""
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, tree)


def make_ensemble_step(
    cfg: TrialConfig,
    task: Task,
    optimizer: optax.GradientTransformation,
    *,
    length: int,
    guard: TraceGuard,
) -> Callable:
    """A jitted `step(inputs: EnsembleInputs, params, opt_state) -> (params, opt_state, metrics)`.

    `params` and `opt_state` are stacked over seeds (k, ...) and donated; `metrics` holds `loss`
    and `grad_norm` of shape (k,). Each seed's batch (batch_size, length) is sampled from
    `fold_in(data_keys[i], step)`, inside the program.
    """
    body = train_step_body(cfg, task, optimizer, length=length)
    per_seed = eqx.filter_vmap(body, in_axes=(0, 0, 0, 0, None))
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

    @eqx.filter_jit(donate="all-except-first")  # type: ignore[misc]
    def step(inputs: EnsembleInputs, params, opt_state):
        guard.hit()
        keys = fold(inputs.data_keys, inputs.step)
        return per_seed(inputs.static, params, opt_state, keys, inputs.operands)

    return step


def train_ensemble(
    cfg: TrialConfig, seeds: Sequence[int], *, steps: int | None = None
) -> list[TrainResult]:
    """Train `cfg` once per seed in `seeds` (k of them) as one vmapped program, from scratch.

    Returns one `TrainResult` per seed, in order, like `train(cfg with train.seed = s)` would:
    unstacked model and optimiser state, history rows (step, loss, grad_norm, lr, tokens_per_s
    per seed) every `train.log_every` steps. A seed with a non-finite loss is marked diverged at
    that step and logs nothing more; the others go on (the loop stops when all diverged).
    `wall_time_s` is the whole ensemble's.
    """
    seeds = list(seeds)
    tc = cfg.train
    total = tc.steps if steps is None else steps
    length = tc.length
    task = task_from_config(cfg.task)
    task.validate(length)
    models = init_ensemble(cfg, seeds)
    sched_cfg = TrainConfig(**{**tc.__dict__, "steps": total})
    optimizer = make_optimizer(sched_cfg, models)  # masks and multipliers depend on shape only
    params, static = eqx.partition(models, trainable(models))
    opt_state = eqx.filter_vmap(optimizer.init)(params)
    guard = TraceGuard("ensemble_step")
    step_fn = make_ensemble_step(cfg, task, optimizer, length=length, guard=guard)
    schedule = lr_schedule(sched_cfg)
    data_keys = seed_keys(seeds, 1)
    operands = task.operands()

    k = len(seeds)
    histories: list[list[dict]] = [[] for _ in seeds]
    diverged = [False] * k
    done_at = [total] * k
    pending: list[tuple[int, dict]] = []
    tokens_per_step = tc.batch_size * length
    start_time = window_start = time.perf_counter()
    window_steps = 0

    for step in range(total):
        inputs = EnsembleInputs(static, data_keys, jnp.asarray(step, jnp.int32), operands)
        params, opt_state, metrics = step_fn(inputs, params, opt_state)
        guard.check()
        pending.append((step + 1, metrics))
        window_steps += 1
        done = step + 1
        if done % tc.log_every and done != total:
            continue
        fetched = jax.device_get(pending)
        rate = window_steps * tokens_per_step / max(time.perf_counter() - window_start, 1e-9)
        for s, m in fetched:
            for i in range(k):
                if diverged[i]:
                    continue
                row = {
                    "step": s,
                    "loss": float(m["loss"][i]),
                    "grad_norm": float(m["grad_norm"][i]),
                    "lr": float(schedule(s - 1)),
                    "tokens_per_s": rate,
                }
                finite = math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
                if s % tc.log_every == 0 or s == total or not finite:
                    histories[i].append(row)
                if not finite:
                    diverged[i], done_at[i] = True, s
        pending.clear()
        window_start, window_steps = time.perf_counter(), 0
        if all(diverged):
            break

    wall = time.perf_counter() - start_time
    models = eqx.combine(params, static)
    return [
        TrainResult(
            model=unstack(models, i),
            opt_state=unstack(opt_state, i),
            history=histories[i],
            diverged=diverged[i],
            steps_done=done_at[i],
            tokens_seen=done_at[i] * tokens_per_step,
            wall_time_s=wall,
            traces=guard.traces,
        )
        for i in range(k)
    ]


__all__ = [
    "EnsembleInputs",
    "init_ensemble",
    "make_ensemble_step",
    "seed_keys",
    "train_ensemble",
    "unstack",
]

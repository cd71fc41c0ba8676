"""Seed ensembles: k seeds of one trial config trained as a single vmapped program.

Every array of the model and optimiser state gets a leading seed axis (k, ...). Seed s is
initialised from `fold_in(PRNGKey(s), 0)` and draws the batch of step t from
`fold_in(fold_in(PRNGKey(s), 1), t)`, exactly as `rope_lab.trial.train.train` does for a config
with `train.seed = s`, so seed s of the ensemble follows the single-seed run up to float
reordering in the batched matmuls. A host-fed task (`lm_tokens`) gathers each seed's windows of
step t on the host (`Task.host_batch(B, L, seed=s, step=t)`, as `train` does), stacked (k, ...)
and fed to the step along the seed axis. One jitted step updates all k seeds; it is compiled once
per (config, k). The ensemble runs on the default device (`train.devices` is not used).

`train_packed` is the loop: k trial configs equal but for their seeds
(`rope_lab.trial.packing`), resumable from per-member states, each member with its own hooks
(checkpoints, NTK tracking): the train stage of a sweep's packed seeds
(`rope_lab.trial.pipeline.run_pack_train`). `train_ensemble` is it for one config and k seeds.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, PRNGKeyArray

from rope_lab.config import TrainConfig, TrialConfig, replace
from rope_lab.hooks import Hook, StepState
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import Transformer, trainable
from rope_lab.tasks import Task, task_from_config
from rope_lab.trial.packing import mismatch
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
    keys; step: () int32 index of the step being taken (0-based); operands: the task's arrays,
    shared by every seed, or for a host-fed task each seed's step batch stacked (k, B, L + 1).
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
    `fold_in(data_keys[i], step)`, inside the program, or for a host-fed task read from its
    slice i of `inputs.operands` (the seed axis leads).
    """
    body = train_step_body(cfg, task, optimizer, length=length)
    operand_axis = 0 if task.host_fed else None
    per_seed = eqx.filter_vmap(body, in_axes=(0, 0, 0, 0, operand_axis))
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

    @eqx.filter_jit(donate="all-except-first")  # type: ignore[misc]
    def step(inputs: EnsembleInputs, params, opt_state):
        guard.hit()
        keys = fold(inputs.data_keys, inputs.step)
        return per_seed(inputs.static, params, opt_state, keys, inputs.operands)

    return step


@eqx.filter_jit
def _stack_arrays(trees: list[Any]) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


@eqx.filter_jit
def _split_arrays(tree: Any, k: int) -> list[Any]:
    return [jax.tree.map(operator.itemgetter(i), tree) for i in range(k)]


def stack(trees: Sequence[Any]) -> Any:
    """Pytrees of one structure stacked into one: every array leaf (k, ...), each new; other
    leaves from the first (the inverse of `split`). One compiled program for the whole tree
    (stacking leaf by leaf compiles one small program per leaf shape)."""
    arrays = [eqx.filter(t, eqx.is_array) for t in trees]
    rest = eqx.filter(trees[0], eqx.is_array, inverse=True)
    return eqx.combine(_stack_arrays(arrays), rest)


def split(tree: Any, k: int) -> list[Any]:
    """The k members of a stacked pytree (`unstack` of each), in one compiled program."""
    arrays, rest = eqx.partition(tree, eqx.is_array)
    return [eqx.combine(member, rest) for member in _split_arrays(arrays, k)]


def host_batches(
    task: Task, seeds: Sequence[int], batch_size: int, length: int, step: int
) -> tuple[jax.Array, ...]:
    """The operands of training step `step` for each seed of a host-fed task, stacked on the
    default device: each array (k, ...) with slice i `task.host_batch(batch_size, length,
    seed=seeds[i], step=step)` (for `lm_tokens` (k, B, L + 1) windows)."""
    parts = [task.host_batch(batch_size, length, seed=s, step=step) for s in seeds]
    return tuple(jax.device_put(np.stack(arrays)) for arrays in zip(*parts, strict=True))


def train_ensemble(
    cfg: TrialConfig, seeds: Sequence[int], *, steps: int | None = None
) -> list[TrainResult]:
    """Train `cfg` once per seed in `seeds` (k of them) as one vmapped program, from scratch:
    `train_packed` of `cfg` with `train.seed` set to each seed, without hooks."""
    if not seeds:
        raise ValueError("seeds: need at least one seed")
    return train_packed([replace(cfg, **{"train.seed": s}) for s in seeds], steps=steps)


def train_packed(
    cfgs: Sequence[TrialConfig],
    *,
    models: Sequence[Transformer] | None = None,
    opt_states: Sequence[Any] | None = None,
    start_step: int = 0,
    hooks: Sequence[Sequence[Hook]] | None = None,
    steps: int | None = None,
) -> list[TrainResult]:
    """Train the trials `cfgs` (k of them, equal but for their seeds:
    `rope_lab.trial.packing.mismatch`) as one vmapped program, from `start_step` to `steps`
    (default `train.steps`), as `rope_lab.trial.train.train` trains each alone.

    `models` / `opt_states` (one per member; None: `make_model` of each config, a fresh
    optimiser state) resume a run; every member starts at `start_step`. `hooks[i]` are member
    i's hooks (`rope_lab.hooks`), called with member i's own unstacked model, optimiser
    state and history at the steps `train` would call them. Returns one `TrainResult` per member,
    in order, like `train(cfgs[i], ...)`: model and optimiser state unstacked, history rows (step,
    loss, grad_norm, lr, tokens_per_s per member) every `train.log_every` steps. A member with a
    non-finite loss is marked diverged at that step and logs and hooks nothing more; the others
    go on (the loop stops when all diverged). `wall_time_s` is the whole pack's. The pack runs
    on the default device (`train.devices` is not used).
    """
    cfgs = list(cfgs)
    if not cfgs:
        raise ValueError("seeds: need at least one seed")
    reason = mismatch(cfgs)
    if reason is not None:
        raise ValueError(f"cannot train as one pack: {reason}")
    k = len(cfgs)
    cfg = cfgs[0]
    tc = cfg.train
    total = tc.steps if steps is None else steps
    length = tc.length
    task = task_from_config(cfg.task)
    task.validate(length)
    seeds = [c.train.seed for c in cfgs]
    if models is None:
        models = [make_model(c) for c in cfgs]
    if len(models) != k or (opt_states is not None and len(opt_states) != k):
        raise ValueError(f"need one model and optimiser state per member ({k})")
    stacked = stack(models)
    sched_cfg = TrainConfig(**{**tc.__dict__, "steps": total})
    optimizer = make_optimizer(sched_cfg, stacked)  # masks and multipliers depend on shape only
    params, static = eqx.partition(stacked, trainable(stacked))
    opt_state = eqx.filter_vmap(optimizer.init)(params) if opt_states is None else stack(opt_states)
    guard = TraceGuard("ensemble_step")
    step_fn = make_ensemble_step(cfg, task, optimizer, length=length, guard=guard)
    schedule = lr_schedule(sched_cfg)
    data_keys = seed_keys(seeds, 1)
    operands = None if task.host_fed else task.operands()
    member_hooks = [list(h) for h in hooks] if hooks is not None else [[] for _ in cfgs]
    if len(member_hooks) != k:
        raise ValueError(f"hooks: need one list of hooks per member ({k}), got {len(member_hooks)}")

    histories: list[list[dict]] = [[] for _ in cfgs]
    diverged = [False] * k
    done_at = [total] * k
    pending: list[tuple[int, dict]] = []
    tokens_per_step = tc.batch_size * length
    start_time = window_start = time.perf_counter()
    window_steps = 0

    def run_hooks(done: int, *, at_start: bool = False) -> None:
        due = [
            [h for h in own if (h.due_at_start() if at_start else h.due_after(done, total))]
            for own in member_hooks
        ]
        if not any(hs for hs, gone in zip(due, diverged, strict=True) if not gone):
            return  # no member states built at steps without hooks
        members = split((eqx.combine(params, static), opt_state), k)
        for i, ((model, opt), hs) in enumerate(zip(members, due, strict=True)):
            if diverged[i]:
                continue
            state = StepState(done, model, opt, histories[i])
            for hook in hs:
                hook.fn(state)

    if start_step == 0:
        run_hooks(0, at_start=True)

    for step in range(start_step, total):
        ops = operands
        if ops is None:  # each seed's windows of this step, gathered while the last step runs
            ops = host_batches(task, seeds, tc.batch_size, length, step)
        inputs = EnsembleInputs(static, data_keys, jnp.asarray(step, jnp.int32), ops)
        params, opt_state, metrics = step_fn(inputs, params, opt_state)
        guard.check()
        pending.append((step + 1, metrics))
        window_steps += 1
        done = step + 1
        if done % tc.log_every == 0 or done == total:
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
        run_hooks(done)

    wall = time.perf_counter() - start_time
    members = split((eqx.combine(params, static), opt_state), k)
    return [
        TrainResult(
            model=members[i][0],
            opt_state=members[i][1],
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
    "host_batches",
    "init_ensemble",
    "make_ensemble_step",
    "seed_keys",
    "split",
    "stack",
    "train_ensemble",
    "train_packed",
    "unstack",
]

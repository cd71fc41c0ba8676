"""Training: one jitted step that samples its own batch (deterministic in the step index, so
resuming is exact) and updates with the trial's optimiser (`rope_lab.trial.optimizer`: AdamW,
warmup + cosine, clipping, muP learning-rate groups), and a loop with hooks
(`rope_lab.hooks`) for evaluation, checkpoints and NTK tracking. A non-finite loss stops
the run and marks it diverged. The step runs data-parallel over `train.devices` local devices
(`rope_lab.trial.parallel`): batch split over a 1-D "data" mesh, parameters replicated.

The model comes from `rope_lab.model.factory`, the loss from `rope_lab.trial.objective`,
positions from `rope_lab.model.positions`, the task from `rope_lab.tasks.task_from_config`;
`make_model`, `make_task_from`, `batch_positions`, `token_losses`, `masked_loss`,
`make_optimizer` and `lr_schedule` stay importable from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import optax
from jax.sharding import Mesh

from rope_lab.config import TrainConfig, TrialConfig
from rope_lab.hooks import Hook, StepState
from rope_lab.model.factory import make_model
from rope_lab.model.positions.modules import batch_positions
from rope_lab.model.positions.modules.pose import pose_batch_positions
from rope_lab.model.transformer import Transformer, trainable, with_remat
from rope_lab.tasks import Task, task_from_config
from rope_lab.trial.objective import masked_loss, token_losses
from rope_lab.trial.optimizer import lr_schedule, make_optimizer
from rope_lab.trial.parallel import (
    batch_sharding,
    constrain_batch,
    constrain_replicated,
    constrain_sharded,
    data_mesh,
    replicate,
    resolve_devices,
    shard,
    to_default_device,
)


def make_task_from(cfg: TrialConfig) -> Task:
    """The trial's task: `rope_lab.tasks.task_from_config(cfg.task)`, under its old name."""
    return task_from_config(cfg.task)


def init_state(cfg: TrialConfig) -> tuple[Transformer, Any]:
    """A fresh model and its optimizer state (also the skeleton for restoring a checkpoint)."""
    model = make_model(cfg)
    params = eqx.filter(model, trainable(model))
    return model, make_optimizer(cfg.train, model).init(params)


@dataclass
class TraceGuard:
    """Counts traces of a jitted function; `check` raises if it retraced."""

    name: str
    traces: int = 0
    allowed: int = 1

    def hit(self) -> None:
        """Called from inside the traced function body (runs once per trace)."""
        self.traces += 1

    def check(self) -> None:
        """Raise RuntimeError if the function was traced more often than allowed."""
        if self.traces > self.allowed:
            raise RuntimeError(f"{self.name} retraced {self.traces} times (allowed {self.allowed})")


def train_step_body(
    cfg: TrialConfig,
    task: Task,
    optimizer: optax.GradientTransformation,
    *,
    length: int,
    mesh: Mesh | None = None,
    pose: bool = True,
) -> Callable:
    """The un-jitted step `(static, params, opt_state, key, operands) -> (params, opt_state,
    metrics)`: sample a (batch_size, length) batch from `key`, one optimiser update.

    With `mesh`, the sampled batch and positions (B, L) are split over its "data" axis and the
    new parameters and optimiser state are kept replicated, or sharded over it with
    `train.shard_params` (see `rope_lab.trial.parallel`).
    `metrics` holds scalar `loss` and `grad_norm`. `rope_lab.trial.ensemble` vmaps this body.
    The forward runs under `train.remat` (`transformer.with_remat`; the returned parameters
    and every other forward are unaffected).
    With `pose` and `train.pose_target_length` set, positions are PoSE's
    (`rope_lab.model.positions.modules.pose`), else `batch_positions`'s.
    """
    batch_size = cfg.train.batch_size
    use_pose = pose and cfg.train.pose_target_length is not None
    positions_of = pose_batch_positions if use_pose else batch_positions
    keep_state = constrain_sharded if cfg.train.shard_params else constrain_replicated
    remat = cfg.train.remat

    def step(static, params, opt_state, key, operands):
        data_key, pos_key = jax.random.split(key)
        batch = task.sample_from(operands, batch_size, length, key=data_key)
        positions = positions_of(cfg, key=pos_key, batch_size=batch_size, length=length)
        if mesh is not None:
            batch, positions = constrain_batch((batch, positions), mesh)

        def loss_of(p):
            model = eqx.combine(p, static)
            if remat != "none":
                model = with_remat(model, remat)
            return masked_loss(model, batch, positions)

        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = eqx.apply_updates(params, updates)
        if mesh is not None:
            params, opt_state = keep_state((params, opt_state), mesh)
        return params, opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    return step


def make_train_step(
    cfg: TrialConfig,
    task: Task,
    optimizer: optax.GradientTransformation,
    *,
    length: int,
    guard: TraceGuard,
    mesh: Mesh | None = None,
    pose: bool = True,
) -> Callable:
    """A jitted `step(static, params, opt_state, key, operands) -> (params, opt_state, metrics)`.

    `static` holds the non-trainable part (buffers included), so it is not donated; `operands`
    are the task's fixed arrays (e.g. a text corpus), passed as arguments, not baked into the
    compiled program as constants. With `mesh` the step is data-parallel over it; pass
    parameters, optimiser state, `static` and `operands` replicated on the mesh
    (`rope_lab.trial.parallel.replicate`). `pose` as in `train_step_body`.
    """
    body = train_step_body(cfg, task, optimizer, length=length, mesh=mesh, pose=pose)

    @eqx.filter_jit(donate="all-except-first")  # type: ignore[misc]
    def step(static, params, opt_state, key, operands):
        guard.hit()
        return body(static, params, opt_state, key, operands)

    return step


@dataclass
class TrainResult:
    """Final model and optimizer state, loss curve, and whether the run diverged."""

    model: Transformer
    opt_state: Any
    history: list[dict] = field(default_factory=list)
    diverged: bool = False
    steps_done: int = 0
    tokens_seen: int = 0
    wall_time_s: float = 0.0
    traces: int = 0


def train(
    cfg: TrialConfig,
    *,
    model: Transformer | None = None,
    opt_state: Any = None,
    start_step: int = 0,
    hooks: Sequence[Hook] = (),
    length: int | None = None,
    steps: int | None = None,
    lr: float | None = None,
    data_seed: int | None = None,
    pose: bool | None = None,
    stop: Callable[[int], bool] | None = None,
) -> TrainResult:
    """Train from `start_step` to `steps` (default cfg.train.steps) at `length` (default L_train).

    `model`/`opt_state` resume a run; the batch of step s depends only on (seed, s), sampled
    inside the step, or for a `host_fed` task gathered on the host (`Task.host_batch`). Overrides of
    length/steps/lr serve fine-tuning at a target length. The step is data-parallel over
    `train.devices` local devices (None: all); the returned model is on the first device.
    `pose`: PoSE positions when `train.pose_target_length` is set (None: unless `length` is
    overridden, since fine-tuning trains on contiguous positions at its own target length).
    `stop(step)`, asked after each step's hooks, ends the run there when true (the schedule
    stays that of `steps`; `rope_lab.trial.match` stops at a target loss).
    """
    tc = cfg.train
    pose = length is None if pose is None else pose
    length = tc.length if length is None else length
    total = tc.steps if steps is None else steps
    mesh = data_mesh(resolve_devices(tc.devices, tc.batch_size))
    task = task_from_config(cfg.task)
    task.validate(length)
    model = make_model(cfg) if model is None else model
    sched_cfg = TrainConfig(**{**tc.__dict__, "steps": total})
    optimizer = make_optimizer(sched_cfg, model, lr)
    params, static = eqx.partition(model, trainable(model))
    # The step donates its inputs: copy the caller's parameters (its opt_state is consumed).
    place = shard if tc.shard_params else replicate
    params = place(params, mesh, copy=True)
    static = replicate(static, mesh)
    opt_state = place(optimizer.init(params) if opt_state is None else opt_state, mesh)
    # A host-fed task (lm_tokens) gathers each step's windows from disk instead (below).
    operands = None if task.host_fed else replicate(task.operands(), mesh)
    guard = TraceGuard("train_step")
    step_fn = make_train_step(
        cfg, task, optimizer, length=length, guard=guard, mesh=mesh, pose=pose
    )
    schedule = lr_schedule(sched_cfg, lr)
    seed = tc.seed if data_seed is None else data_seed
    data_key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)

    history: list[dict] = []
    pending: list[tuple[int, dict]] = []
    diverged = False
    done = start_step
    tokens_per_step = tc.batch_size * length
    start_time = window_start = time.perf_counter()
    window_steps = 0

    def state(step: int) -> StepState:
        return StepState(step, eqx.combine(params, static), opt_state, history)

    if start_step == 0:
        for hook in hooks:
            if hook.due_at_start():
                hook.fn(state(0))

    for step in range(start_step, total):
        key = jax.random.fold_in(data_key, step)
        ops = operands
        if ops is None:  # the windows of (seed, step), gathered while the last step runs
            ops = jax.device_put(
                task.host_batch(tc.batch_size, length, seed=seed, step=step),
                batch_sharding(mesh),
            )
        params, opt_state, metrics = step_fn(static, params, opt_state, key, ops)
        guard.check()
        pending.append((step + 1, metrics))
        window_steps += 1
        done = step + 1
        if done % tc.log_every == 0 or done == total:
            fetched = jax.device_get(pending)
            now = time.perf_counter()
            rate = window_steps * tokens_per_step / max(now - window_start, 1e-9)
            for s, m in fetched:
                row = {
                    "step": s,
                    "loss": float(m["loss"]),
                    "grad_norm": float(m["grad_norm"]),
                    "lr": float(schedule(s - 1)),
                    "tokens_per_s": rate,
                }
                finite = math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
                if s % tc.log_every == 0 or s == total or not finite:
                    history.append(row)
                if not finite:
                    diverged, done = True, s
                    break
            pending.clear()
            window_start, window_steps = time.perf_counter(), 0
            if diverged:
                break
        for hook in hooks:
            if hook.due_after(done, total):
                hook.fn(state(done))
        if stop is not None and stop(done):
            break

    steps_done = done
    return TrainResult(
        model=to_default_device(eqx.combine(params, static)),
        opt_state=opt_state,
        history=history,
        diverged=diverged,
        steps_done=steps_done,
        tokens_seen=steps_done * tokens_per_step,
        wall_time_s=time.perf_counter() - start_time,
        traces=guard.traces,
    )


__all__ = [
    "TraceGuard",
    "TrainResult",
    "batch_positions",
    "init_state",
    "lr_schedule",
    "make_model",
    "make_optimizer",
    "make_task_from",
    "make_train_step",
    "masked_loss",
    "token_losses",
    "train",
    "train_step_body",
]

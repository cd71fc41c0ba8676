"""Empirical-NTK tracking during training: fixed probe sets, kernels at chosen steps, metrics as
long-format rows for the `ntk` table, and the kernels themselves as `.npz` files for plots.

Probe sets are drawn once per trial from the task (seeded by `ntk.seed`) and reused at every
NTK step, so drift is comparable: D_short of `probes` sequences at L_train and one D_long per
`ntk.probe_multipliers` x L_train. The metric rows are the metrics registered in
`rope_lab.ntk.metrics` (`NTK_METRICS`, in registration order), each a function of one
parameter group's kernels (group = "total" or a parameter group): K_train metrics at every NTK
step (probe_length = L_train; drift against step 0 and the previous NTK step), K_cross metrics
at every long probe length (probe_length = that length), and shift-invariance errors
(positions offset by L_train) at step 0 and the last step. At the last step a RoPE model's
K_cross is also measured under each RoPE scaling by that scaling's stage (`under_scalings`; rows
of the metrics registered with `scaled`, with `method`, `factor`, at the last step).

Cost: each NTK step takes one gradient pass over the short probes and one over each long probe
set (two output masks, whole and tail, sharing a forward pass); every kernel and metric is a
contraction of those features. A trial's tracking, the position kernels and the RoPE scalings
included, compiles one gradient program per probe length; with `ntk.pad_to_longest` just one
(probes padded to the longest length: fewer compilations, which dominate tiny trials, for more
compute per NTK step). `rope_lab.ntk.plan` lists these steps and gradient passes without JAX
(the sweep plan counts their FLOPs from it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from rope_lab.config import TrialConfig, thaw
from rope_lab.model.transformer import Transformer, with_scaling
from rope_lab.ntk import metrics as nm
from rope_lab.ntk.kernels import (
    GradientFeatures,
    cross_tail_kernels,
    feature_kernels,
    gradient_features,
    row_blocks,
    total_kernel,
)
from rope_lab.ntk.plan import ntk_steps
from rope_lab.registry import NTK_METRICS
from rope_lab.runtime.atomic import atomic_write
from rope_lab.runtime.xla_options import FEW_CALLS
from rope_lab.tasks import Task
from rope_lab.trial.hooks import Hook, StepState
from rope_lab.trial.scaling_plan import Scaling

TOTAL = "total"
# `nm.Kernels` field -> kernels-file key of one long probe length
LONG_KEYS = {
    "K_cross": "cross{}/" + TOTAL,
    "diag_long": "diag{}",
    "tail_cos": "tailcos{}",
    "head_cos": "headcos{}",
}


@dataclass
class ProbeSets:
    """Fixed probes: short (N, L_train) tokens and targets/masks, long[L] tokens."""

    short: np.ndarray
    short_targets: np.ndarray
    short_mask: np.ndarray
    long: dict[int, np.ndarray]


def draw_probes(cfg: TrialConfig, task: Task) -> ProbeSets:
    """Probe sets of a trial, drawn once with `ntk.seed` from its task's eval split."""
    key = jax.random.PRNGKey(cfg.ntk.seed)
    n, length = cfg.ntk.probes, cfg.train.length
    operands = task.operands("eval")
    # one program per length, not one per eager op; the operands are arguments, not constants
    sample = eqx.filter_jit(task.sample_from, compiler_options=FEW_CALLS)  # type: ignore[call-overload]
    short = sample(operands, n, length, key=jax.random.fold_in(key, length))
    long = {
        L: np.asarray(sample(operands, n, L, key=jax.random.fold_in(key, L)).tokens)
        for L in cfg.ntk_lengths
    }
    return ProbeSets(
        np.asarray(short.tokens), np.asarray(short.targets), np.asarray(short.mask), long
    )


def readout(cfg: TrialConfig) -> str | jax.Array:
    """The `output` argument of the kernels: a fixed Gaussian u (V,), "trace" or "target"."""
    if cfg.ntk.output == "random":
        return jax.random.normal(jax.random.PRNGKey(cfg.ntk.seed + 1), (cfg.task.vocab_size,))
    return cfg.ntk.output


def _target_values(cfg: TrialConfig, probes: ProbeSets, output) -> np.ndarray | None:
    """y for kernel-target alignment: the readout of a perfect model on each short probe."""
    if isinstance(output, str):
        return None
    u = np.asarray(output) / math.sqrt(cfg.task.vocab_size)
    return (u[probes.short_targets] * probes.short_mask).sum(axis=1)


@dataclass
class NTKTracker:
    """Measures kernels of a trial's model at its NTK steps; keeps K_0 and the last kernels.

    `folder` (optional) receives `ntk/kernels_<step>.npz`; on resume the reference kernels are
    read back from there, so drift metrics stay relative to step 0.
    """

    cfg: TrialConfig
    task: Task
    folder: Path | None = None
    probes: ProbeSets = field(init=False)
    output: str | jax.Array = field(init=False)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    previous: tuple[int, dict[str, np.ndarray]] | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.probes = draw_probes(self.cfg, self.task)
        self.output = readout(self.cfg)
        self._restore()

    @property
    def steps(self) -> tuple[int, ...]:
        """Steps at which kernels are measured."""
        return ntk_steps(self.cfg)

    def _path(self, step: int) -> Path | None:
        return None if self.folder is None else self.folder / "ntk" / f"kernels_{step:08d}.npz"

    def _restore(self) -> None:
        if self.folder is None or not (self.folder / "ntk").exists():
            return
        files = sorted((self.folder / "ntk").glob("kernels_*.npz"))
        if files:
            with np.load(files[0]) as first:
                self.initial = dict(first)
            with np.load(files[-1]) as last:
                self.previous = (int(files[-1].stem.split("_")[1]), dict(last))

    @property
    def program_length(self) -> int:
        """Sequence length of the gradient program when `ntk.pad_to_longest`: the longest probe."""
        return max((self.cfg.train.length, *self.probes.long))

    def _features(
        self, model: Transformer, tokens: np.ndarray, *, masks=None, positions=None
    ) -> GradientFeatures:
        """Gradient features of tokens (n, L) under masks (R, L) or (n, R, L), R <= 2.

        With `ntk.pad_to_longest` every call runs one compiled program of shape (chunk, 2,
        longest probe): the model is causal, so tokens appended after position L change no
        output at positions < L, and the padded positions are masked out."""
        n, length = tokens.shape
        m = np.ones((1, length), np.float32) if masks is None else np.asarray(masks, np.float32)
        m = np.broadcast_to(m, (n, *m.shape[-2:]))
        rows = m.shape[1]
        pad = self.program_length - length
        kw: dict[str, Any] = {"output": self.output, "chunk_size": self.cfg.ntk.chunk_size}
        if not self.cfg.ntk.pad_to_longest or (pad == 0 and rows == 2):
            return gradient_features(model, tokens, masks=m, positions=positions, **kw)
        if isinstance(self.output, str) and self.output == "target":
            # f_{L-1} = 0 at the probe's own length, but padded, position L-1 has a next token
            m = np.array(m)
            m[..., length - 1] = 0.0
        pos = np.arange(length, dtype=np.int32) if positions is None else np.asarray(positions)
        pos = np.broadcast_to(pos, (n, length))
        feats = gradient_features(
            model,
            np.pad(tokens, ((0, 0), (0, pad))),
            masks=np.pad(m, ((0, 0), (0, 2 - rows), (0, pad))),
            positions=np.pad(pos, ((0, 0), (0, pad)), mode="edge"),
            **kw,
        )
        return feats.combine(np.eye(2, dtype=np.float32)[:rows])

    def _long_features(self, model: Transformer, length: int) -> GradientFeatures:
        """Rows per long probe: its whole output F, then its unseen tail F_tail (i >= L_train)."""
        tail = (np.arange(length) >= self.cfg.train.length).astype(np.float32)
        return self._features(
            model, self.probes.long[length], masks=np.stack([np.ones_like(tail), tail])
        )

    def _kernels(self, model: Transformer) -> dict[str, np.ndarray]:
        """K_train, K_cross per group, long diagonals and tail/head cosines, from one gradient
        pass over the short probes and one (two masks) over each long probe set."""
        short = self._features(model, self.probes.short)
        out = {f"train/{g}": k for g, k in _with_total(feature_kernels(short, short)).items()}
        short_sq = np.diag(out[f"train/{TOTAL}"])
        for length in self.probes.long:
            t = cross_tail_kernels(self._long_features(model, length), short, short_sq)
            out |= {f"cross{length}/{g}": k for g, k in t["groups"].items()}
            fields = _cross_fields(t)
            out |= {key.format(length): fields[field] for field, key in LONG_KEYS.items()}
        return out

    def measure(self, model: Transformer, step: int) -> list[dict]:
        """Kernels and metric rows at one step (stores the kernels when `folder` is set)."""
        kernels = self._kernels(model)
        if step == 0 or not self.initial:
            self.initial = kernels
        rows = self._rows(kernels, step)
        path = self._path(step)
        if path is not None:
            atomic_write(path, lambda f: np.savez(f, **kernels))  # type: ignore[arg-type]
        self.previous = (step, kernels)
        return rows

    def _rows(self, k: dict[str, np.ndarray], step: int) -> list[dict]:
        """Metric rows of one step's kernels `k`: the "train" metrics of every group, then the
        "cross" metrics of every long probe length and group."""
        L = self.cfg.train.length
        groups = [key.split("/")[1] for key in k if key.startswith("train/")]
        y = _target_values(self.cfg, self.probes, self.output)
        prev_step, prev = self.previous if self.previous is not None else (step, {})
        diag_short, ridge = np.diag(k[f"train/{TOTAL}"]), self.cfg.ntk.ridge

        def train(g: str) -> nm.Kernels:
            K_0, K_prev = self.initial.get(f"train/{g}"), prev.get(f"train/{g}")
            return nm.Kernels(k[f"train/{g}"], diag_short, K_0, K_prev, step - prev_step, y, ridge)

        base = {g: train(g) for g in groups}
        rows = [row for g in groups for row in _metric_rows("train", base[g], step, L, g)]
        for length in self.probes.long:
            long: dict[str, Any] = {f: k[key.format(length)] for f, key in LONG_KEYS.items()}
            for g in groups:
                long["K_cross"] = k[f"cross{length}/{g}"]
                rows += _metric_rows("cross", replace(base[g], **long), step, length, g)
        return rows

    def position_kernels(self, model: Transformer) -> dict[str, np.ndarray]:
        """Position-resolved kernels on `ntk.position_probes` probes, averaged over probe pairs:
        K_train (L, L) over training positions, K_cross (L, L_long) against the longest probes,
        and the profile (L_long,): mean kernel of each long position with the training
        positions. Saved as `ntk/position_kernels.npz` when `folder` is set.

        The mean over pairs of <grad f_i(a), grad f_j(b)> is <mean_a grad f_i(a), mean_b grad
        f_j(b)>, so only probe-averaged per-position gradients are kept (L + L_long rows). They
        come from the same compiled programs as the sequence kernels (one-hot masks on copies
        of each probe), so the end of training compiles nothing new.
        """
        n, L = self.cfg.ntk.position_probes, self.cfg.train.length
        rows = 2 if self.cfg.ntk.pad_to_longest else 1  # the sequence kernels' program shape
        short = self._mean_position_features(model, self.probes.short[:n], rows=rows)
        K_train = total_kernel(feature_kernels(short, short))
        arrays = {"K_train": K_train, "train_length": np.asarray(L)}
        if self.probes.long:
            length = max(self.probes.long)
            long = self._mean_position_features(model, self.probes.long[length][:n], rows=2)
            K_cross = total_kernel(feature_kernels(short, long))
            arrays |= {
                "K_cross": K_cross,
                "profile": K_cross.mean(0),
                "positions": np.arange(length),
                "profile_label": np.asarray("mean kernel with training positions"),
            }
        if self.folder is not None and "K_cross" in arrays:
            path = self.folder / "ntk" / "position_kernels.npz"
            atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
        return arrays

    def _mean_position_features(
        self, model: Transformer, tokens: np.ndarray, rows: int
    ) -> GradientFeatures:
        """(1/n) sum_a grad f_i(x_a) for every position i of tokens (n, L): features (L, ...).

        Each probe is copied once per block of `rows` positions, with one-hot masks, so the
        gradient program has the shape (chunk, rows, L) of the sequence-kernel calls."""
        n, length = tokens.shape
        copies, masks, _ = row_blocks(tokens, np.eye(length, dtype=np.float32), rows)
        feats = self._features(model, copies, masks=masks).unblock(n, length)
        leaves = tuple(leaf.reshape(n, length, -1).mean(0) for leaf in feats.leaves)
        return GradientFeatures(leaves, feats.groups, length, 1)

    def shift_invariance(self, model: Transformer, step: int) -> list[dict]:
        """Shift-invariance error of K_train, total and per group, positions offset by L_train:
        |K(x + L, x' + L) - K(x, x')|_F / |K(x, x')|_F (~0 when only relative positions enter)."""
        L = self.cfg.train.length
        if self.previous is not None and self.previous[0] == step:
            train = self.previous[1].items()
            base = {k.removeprefix("train/"): v for k, v in train if k.startswith("train/")}
        else:
            short = self._features(model, self.probes.short)
            base = _with_total(feature_kernels(short, short))
        moved = self._features(model, self.probes.short, positions=np.arange(L, dtype=np.int32) + L)
        shifted = _with_total(feature_kernels(moved, moved))
        diag_short, rows = np.diag(base[TOTAL]), []
        for g in (TOTAL, *(g for g in base if g != TOTAL)):
            kernels = nm.Kernels(base[g], diag_short, K_shift=shifted[g])
            rows += _metric_rows("shift", kernels, step, L, g)
        return rows

    def under_scalings(
        self, model: Transformer, step: int, scalings: Sequence[Scaling]
    ) -> list[dict]:
        """The total kernel's metrics registered with `scaled` (K_cross cosines, tail), in
        registry order, of a RoPE model under each of `scalings` (the model's frequencies
        recomputed; dynamic scaling per probe length); the sweep's scaling stages call it with
        their own scaling. Empty for other encodings.

        Gradient passes are shared between scalings that give the same frequencies (dynamic
        scaling at L_train is the unscaled model for every factor)."""
        if not self.cfg.model.supports_scaling:
            return []
        rows: list[dict] = []
        L = self.cfg.train.length
        cache: dict[tuple, GradientFeatures] = {}
        scaled_metrics = [(name, m) for name, m in NTK_METRICS.items() if m.scaled]

        def features(scaled: Transformer, length: int) -> GradientFeatures:
            rotary = (scaled.position, scaled.layer_positions)
            key = (length, *(np.asarray(x).tobytes() for x in jax.tree.leaves(rotary)))
            if key not in cache:
                if length == L:
                    cache[key] = self._features(scaled, self.probes.short)
                else:
                    cache[key] = self._long_features(scaled, length)
            return cache[key]

        for s in scalings:
            params = thaw(s.params)
            short = features(with_scaling(model, s.method, s.factor, params, seq_len=L), L)
            K_train = total_kernel(feature_kernels(short, short))
            short_sq = np.diag(K_train)
            for length in self.probes.long:
                scaled = with_scaling(model, s.method, s.factor, params, seq_len=length)
                t = cross_tail_kernels(features(scaled, length), short, short_sq)
                kernels = nm.Kernels(K_train, short_sq, **_cross_fields(t))
                for name, metric in scaled_metrics:
                    value = metric(kernels)
                    if value is not None:
                        rows.append(_row(step, length, TOTAL, name, value, s.method, s.factor))
        return rows


def _row(
    step: int,
    length: int,
    group: str,
    metric: str,
    value: float,
    method: str = "none",
    factor: float = 1.0,
) -> dict:
    """One long-format row of the `ntk` table."""
    return {
        "step": step,
        "probe_length": length,
        "group": group,
        "metric": metric,
        "value": float(value),
        "method": method,
        "factor": float(factor),
    }


def _metric_rows(on: str, kernels: nm.Kernels, step: int, length: int, group: str) -> list[dict]:
    """Rows of the registered metrics written on `on` rows for this group, in registry order."""
    rows = []
    for name, metric in NTK_METRICS.items():
        if metric.on == on and (metric.per_group or group == TOTAL):
            value = metric(kernels)
            if value is not None:
                rows.append(_row(step, length, group, name, value))
    return rows


def _with_total(groups: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-group kernels and, last, their sum under TOTAL."""
    return {**groups, TOTAL: total_kernel(groups)}


def _cross_fields(t: dict[str, Any]) -> dict[str, Any]:
    """The `nm.Kernels` fields of one long length from a `cross_tail_kernels` result."""
    return {
        "K_cross": t["cross"],
        "diag_long": t["long_sqnorm"],
        "tail_cos": t["tail_cos"],
        "head_cos": t["head_cos"],
    }


def tracking_hook(
    cfg: TrialConfig,
    task: Task,
    sink: Callable[[int, list[dict]], None],
    *,
    folder: Path | None = None,
    done_steps: int = 0,
) -> tuple[Hook, NTKTracker]:
    """A training hook measuring the NTK at `ntk_steps(cfg)` (those after `done_steps`);
    `sink(step, rows)` receives the rows. (The metrics under each RoPE scaling come from the
    scaling stages, `NTKTracker.under_scalings`.)"""
    tracker = NTKTracker(cfg, task, folder)
    wanted = {s for s in tracker.steps if s > done_steps or (s == 0 and done_steps == 0)}

    def measure(state: StepState) -> None:
        if state.step not in wanted:
            return
        start = time.perf_counter()
        rows = tracker.measure(state.model, state.step)
        if state.step in (0, cfg.train.steps):
            rows += tracker.shift_invariance(state.model, state.step)
        if state.step == cfg.train.steps:
            tracker.position_kernels(state.model)
        sink(state.step, rows)
        tracker.seconds += time.perf_counter() - start

    return Hook(every=1, fn=measure, at_start=True), tracker


__all__ = ["NTKTracker", "ProbeSets", "draw_probes", "ntk_steps", "readout", "tracking_hook"]

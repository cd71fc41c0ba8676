"""Empirical-NTK tracking during training: fixed probe sets, kernels at chosen steps, metrics as
long-format rows for the `ntk` table, and the kernels themselves as `.npz` files for plots.

Probe sets are drawn once per trial from the task (seeded by `ntk.seed`) and reused at every
NTK step, so drift is comparable: D_short of `probes` sequences at L_train and one D_long per
`ntk.probe_multipliers` x L_train. Metric rows (probe_length = L_train for K_train metrics, the
long length for K_cross metrics; group = "total" or a parameter group):

- k_train_mean, k_train_cos_mean: off-diagonal means of K_train, raw and as cosines;
- k_cross_mean, k_cross_cos_mean, cross_train_ratio, cross_train_cos_ratio (K_cross mean over
  the off-diagonal K_train mean); coverage_mean (how much of each long probe's gradient the
  training span explains); tail_cos_mean / head_cos_mean (gradient cosines of a long probe's
  outputs at positions >= L_train / < L_train against the training probes);
- distance_from_init, relative_change (vs step 0) and velocity (vs the previous NTK step);
- eig_1..eig_5, effective_rank, alignment (centred kernel-target alignment), and
  shift_invariance_error (positions offset by L_train).
At the last step a RoPE model's K_cross is also measured under every scaling method and factor
of the eval config (rows with `method`, `factor`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from rope_lab import ntk_metrics as nm
from rope_lab.atomic import atomic_write
from rope_lab.config import TrialConfig
from rope_lab.model import Transformer, with_scaling
from rope_lab.ntk import position_kernel, sequence_kernel, sequence_kernel_groups, tail_kernel
from rope_lab.tasks import Task
from rope_lab.train import Hook, StepState

TOTAL = "total"


def ntk_steps(cfg: TrialConfig) -> tuple[int, ...]:
    """Configured NTK steps, or 0, 1, 2, 4, ... below train.steps, plus the last step."""
    if cfg.ntk.steps:
        return tuple(sorted(set(cfg.ntk.steps)))
    last = cfg.train.steps
    steps = {0, last}
    s = 1
    while s < last:
        steps.add(s)
        s *= 2
    return tuple(sorted(steps))


@dataclass
class ProbeSets:
    """Fixed probes: short (N, L_train) tokens and targets/masks, long[L] tokens."""

    short: np.ndarray
    short_targets: np.ndarray
    short_mask: np.ndarray
    long: dict[int, np.ndarray]


def draw_probes(cfg: TrialConfig, task: Task) -> ProbeSets:
    """Probe sets of a trial, drawn once from its task with `ntk.seed`."""
    key = jax.random.PRNGKey(cfg.ntk.seed)
    n, length = cfg.ntk.probes, cfg.train.length
    short = task.sample(jax.random.fold_in(key, length), n, length)
    long = {
        L: np.asarray(task.sample(jax.random.fold_in(key, L), n, L).tokens) for L in cfg.ntk_lengths
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

    def _kernels(self, model: Transformer) -> dict[str, np.ndarray]:
        kw: dict[str, Any] = {"output": self.output, "chunk_size": self.cfg.ntk.chunk_size}
        short = self.probes.short
        out: dict[str, np.ndarray] = {}
        groups = sequence_kernel_groups(model, short, short, **kw)
        for g, k in groups.items():
            out[f"train/{g}"] = np.asarray(k)
        out[f"train/{TOTAL}"] = np.sum([out[f"train/{g}"] for g in groups], axis=0)
        for length, tokens in self.probes.long.items():
            cross = sequence_kernel_groups(model, tokens, short, **kw)
            for g, k in cross.items():
                out[f"cross{length}/{g}"] = np.asarray(k)
            out[f"cross{length}/{TOTAL}"] = np.sum([out[f"cross{length}/{g}"] for g in cross], 0)
            out[f"diag{length}"] = np.diag(np.asarray(sequence_kernel(model, tokens, tokens, **kw)))
            tail = tail_kernel(model, tokens, short, self.cfg.train.length, **kw)
            out[f"tailcos{length}"] = np.asarray(tail["tail_cos"])
            out[f"headcos{length}"] = np.asarray(tail["head_cos"])
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
        L = self.cfg.train.length
        rows: list[dict] = []

        def add(metric: str, value: float, length: int = L, group: str = TOTAL) -> None:
            rows.append(
                {
                    "step": step,
                    "probe_length": length,
                    "group": group,
                    "metric": metric,
                    "value": float(value),
                    "method": "none",
                    "factor": 1.0,
                }
            )

        groups = [key.split("/")[1] for key in k if key.startswith("train/")]
        prev = self.previous
        for g in groups:
            K = k[f"train/{g}"]
            stats = nm.kernel_stats(K)
            add("k_train_mean", stats["offdiag_mean"], group=g)
            if g == TOTAL:
                add("k_train_cos_mean", stats["cos_offdiag_mean"])
            K0 = self.initial.get(f"train/{g}")
            if K0 is not None and np.linalg.norm(K0) > 0:
                add("distance_from_init", nm.kernel_distance(K, K0), group=g)
                add("relative_change", nm.relative_change(K, K0), group=g)
            if g == TOTAL and prev is not None and prev[0] < step:
                add("velocity", nm.kernel_velocity(prev[1][f"train/{g}"], K, step - prev[0]))
        K_train = k[f"train/{TOTAL}"]
        for i, lam in enumerate(nm.top_eigenvalues(K_train, 5), start=1):
            add(f"eig_{i}", lam)
        add("effective_rank", nm.effective_rank(K_train))
        y = _target_values(self.cfg, self.probes, self.output)
        if y is not None and np.std(y) > 0:
            add("alignment", nm.kernel_target_alignment(K_train, y))
        diag_short = np.diag(K_train)
        ridge = self.cfg.ntk.ridge * float(np.mean(diag_short))
        for length in self.probes.long:
            diag_long = k[f"diag{length}"]
            for g in groups:
                Kc, Kt = k[f"cross{length}/{g}"], k[f"train/{g}"]
                add("k_cross_mean", float(np.mean(Kc)), length, g)
                ratio = nm.cross_train_ratio(Kc, Kt, diag_long if g == TOTAL else None)
                add("cross_train_ratio", ratio["offdiag_ratio"], length, g)
                if g == TOTAL:
                    add("cross_train_cos_ratio", ratio["cos_offdiag_ratio"], length)
                    cos = nm.cosine(Kc, diag_long, diag_short)
                    add("k_cross_cos_mean", float(np.mean(cos)), length)
                    cover = nm.coverage(Kc, Kt, diag_long, ridge)
                    add("coverage_mean", float(np.mean(cover)), length)
                    add("tail_cos_mean", float(np.mean(k[f"tailcos{length}"])), length)
                    add("head_cos_mean", float(np.mean(k[f"headcos{length}"])), length)
        return rows

    def position_kernels(self, model: Transformer) -> dict[str, np.ndarray]:
        """Position-resolved kernels on `ntk.position_probes` probes, averaged over probe pairs:
        K_train (L, L) over training positions, K_cross (L, L_long) against the longest probes,
        and the profile (L_long,): mean kernel of each long position with the training
        positions. Saved as `ntk/position_kernels.npz` when `folder` is set."""
        n, L = self.cfg.ntk.position_probes, self.cfg.train.length
        short = self.probes.short[:n]
        kw: dict[str, Any] = {"output": self.output, "chunk_size": self.cfg.ntk.chunk_size * L}
        K_train = np.asarray(position_kernel(model, short, short, **kw)).mean((0, 1))
        arrays = {"K_train": K_train, "train_length": np.asarray(L)}
        if self.probes.long:
            length = max(self.probes.long)
            long = self.probes.long[length][:n]
            K_cross = np.asarray(position_kernel(model, short, long, **kw)).mean((0, 1))
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

    def shift_invariance(self, model: Transformer, step: int) -> list[dict]:
        """Shift-invariance error of K_train with positions offset by L_train (one row)."""
        L = self.cfg.train.length
        short = self.probes.short
        err = nm.shift_invariance_error(
            model, short, short, L, output=self.output, chunk_size=self.cfg.ntk.chunk_size
        )
        return [
            {
                "step": step,
                "probe_length": L,
                "group": TOTAL,
                "metric": "shift_invariance_error",
                "value": float(err),
                "method": "none",
                "factor": 1.0,
            }
        ]

    def under_scalings(self, model: Transformer, step: int) -> list[dict]:
        """K_cross cosine metrics of a RoPE model under each eval scaling method and factor."""
        if self.cfg.model.position.kind != "rope":
            return []
        rows: list[dict] = []
        kw: dict[str, Any] = {"output": self.output, "chunk_size": self.cfg.ntk.chunk_size}
        short, L = self.probes.short, self.cfg.train.length
        for method in self.cfg.eval.methods:
            params = self.cfg.eval.params_for(method)
            for factor in self.cfg.eval.factors:
                base = with_scaling(model, method, factor, params, seq_len=L)
                K_train = np.asarray(sequence_kernel(base, short, short, **kw))
                for length, tokens in self.probes.long.items():
                    scaled = with_scaling(model, method, factor, params, seq_len=length)
                    Kc = np.asarray(sequence_kernel(scaled, tokens, short, **kw))
                    diag_long = np.diag(np.asarray(sequence_kernel(scaled, tokens, tokens, **kw)))
                    ratio = nm.cross_train_ratio(Kc, K_train, diag_long)
                    cos = nm.cosine(Kc, diag_long, np.diag(K_train))
                    for metric, value in (
                        ("k_cross_cos_mean", float(np.mean(cos))),
                        ("cross_train_cos_ratio", ratio["cos_offdiag_ratio"]),
                        ("cross_train_ratio", ratio["offdiag_ratio"]),
                    ):
                        rows.append(
                            {
                                "step": step,
                                "probe_length": length,
                                "group": TOTAL,
                                "metric": metric,
                                "value": value,
                                "method": method,
                                "factor": float(factor),
                            }
                        )
        return rows


def tracking_hook(
    cfg: TrialConfig,
    task: Task,
    sink: Callable[[int, list[dict]], None],
    *,
    folder: Path | None = None,
    done_steps: int = 0,
) -> tuple[Hook, NTKTracker]:
    """A training hook measuring the NTK at `ntk_steps(cfg)` (those after `done_steps`), and at
    the last step also under every RoPE scaling; `sink(step, rows)` receives the rows."""
    tracker = NTKTracker(cfg, task, folder)
    wanted = {s for s in tracker.steps if s > done_steps or (s == 0 and done_steps == 0)}

    def measure(state: StepState) -> None:
        if state.step not in wanted:
            return
        start = time.perf_counter()
        rows = tracker.measure(state.model, state.step)
        rows += tracker.shift_invariance(state.model, state.step)
        if state.step == cfg.train.steps:
            rows += tracker.under_scalings(state.model, state.step)
            tracker.position_kernels(state.model)
        sink(state.step, rows)
        tracker.seconds += time.perf_counter() - start

    return Hook(every=1, fn=measure, at_start=True), tracker


__all__ = ["NTKTracker", "ProbeSets", "draw_probes", "ntk_steps", "readout", "tracking_hook"]

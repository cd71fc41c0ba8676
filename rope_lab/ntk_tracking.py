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
- eig_1..eig_5, effective_rank, alignment (centred kernel-target alignment);
- shift_invariance_error (positions offset by L_train), total and per group, at step 0 and the
  last step.
At the last step a RoPE model's K_cross is also measured under every scaling method and factor
of the eval config (rows with `method`, `factor`).

Cost: each NTK step takes one gradient pass over the short probes and one over each long probe
set (two output masks, whole and tail, sharing a forward pass); every kernel and metric is a
contraction of those features. A trial's tracking, the position kernels and the RoPE scalings
included, compiles one gradient program per probe length; with `ntk.pad_to_longest` just one
(probes padded to the longest length: fewer compilations, which dominate tiny trials, for more
compute per NTK step).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from rope_lab import ntk_metrics as nm
from rope_lab.atomic import atomic_write
from rope_lab.config import TrialConfig
from rope_lab.model import Transformer, with_scaling
from rope_lab.ntk import (
    GROUPS,
    GradientFeatures,
    feature_kernels,
    gradient_features,
    total_kernel,
)
from rope_lab.tasks import Task
from rope_lab.train import Hook, StepState
from rope_lab.xla_options import FEW_CALLS

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
    """Probe sets of a trial, drawn once with `ntk.seed` from its task's eval split."""
    key = jax.random.PRNGKey(cfg.ntk.seed)
    n, length = cfg.ntk.probes, cfg.train.length
    operands = task.operands("eval")
    # one program per length, not one per eager op; the operands are arguments, not constants
    sample = eqx.filter_jit(task.sample_from, compiler_options=FEW_CALLS)  # type: ignore[call-overload]
    short = sample(operands, jax.random.fold_in(key, length), n, length)
    long = {
        L: np.asarray(sample(operands, jax.random.fold_in(key, L), n, L).tokens)
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
        if not self.cfg.ntk.pad_to_longest or (pad == 0 and rows == 2):
            return gradient_features(
                model,
                tokens,
                masks=m,
                positions=positions,
                output=self.output,
                chunk_size=self.cfg.ntk.chunk_size,
            )
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
            output=self.output,
            chunk_size=self.cfg.ntk.chunk_size,
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
        out: dict[str, np.ndarray] = {}
        for g, k in feature_kernels(short, short).items():
            out[f"train/{g}"] = (k + k.T) / 2
        out[f"train/{TOTAL}"] = total_kernel({g: out[f"train/{g}"] for g in GROUPS})
        short_sq = np.diag(out[f"train/{TOTAL}"])
        for length in self.probes.long:
            long = self._long_features(model, length)
            cross = long_cross(long, short, short_sq)
            for g, k in cross.pop("groups").items():
                out[f"cross{length}/{g}"] = k
            out[f"cross{length}/{TOTAL}"] = cross["cross"]
            out[f"diag{length}"] = cross["diag"]
            out[f"tailcos{length}"] = cross["tail_cos"]
            out[f"headcos{length}"] = cross["head_cos"]
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
            rows.append(_row(step, length, group, metric, value))

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
        arrays = {"K_train": (K_train + K_train.T) / 2, "train_length": np.asarray(L)}
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
        blocks = -(-length // rows)
        eye = np.eye(blocks * rows, length, dtype=np.float32).reshape(blocks, rows, length)
        copies = np.repeat(tokens, blocks, axis=0)  # probe-major: (n blocks, L)
        masks = np.tile(eye, (n, 1, 1))
        feats = self._features(model, copies, masks=masks)
        leaves = tuple(
            leaf.reshape(n, blocks * rows, -1)[:, :length].mean(0) for leaf in feats.leaves
        )
        return GradientFeatures(leaves, feats.groups, length, 1)

    def shift_invariance(self, model: Transformer, step: int) -> list[dict]:
        """Shift-invariance error of K_train, total and per group, positions offset by L_train:
        |K(x + L, x' + L) - K(x, x')|_F / |K(x, x')|_F (~0 when only relative positions enter)."""
        L = self.cfg.train.length
        if self.previous is not None and self.previous[0] == step:
            base = {g: self.previous[1][f"train/{g}"] for g in (*GROUPS, TOTAL)}
        else:
            short = self._features(model, self.probes.short)
            base = feature_kernels(short, short)
            base[TOTAL] = total_kernel(base)
        shifted_features = self._features(
            model, self.probes.short, positions=np.arange(L, dtype=np.int32) + L
        )
        shifted = feature_kernels(shifted_features, shifted_features)
        shifted[TOTAL] = total_kernel(shifted)
        return [
            _row(step, L, g, "shift_invariance_error", nm.relative_change(shifted[g], base[g]))
            for g in (TOTAL, *GROUPS)
            if np.linalg.norm(base[g]) > 0
        ]

    def under_scalings(self, model: Transformer, step: int) -> list[dict]:
        """K_cross cosine and tail metrics of a RoPE model under each eval scaling method and
        factor (the model's frequencies recomputed; dynamic scaling per probe length).

        Gradient passes are shared between scalings that give the same frequencies (dynamic
        scaling at L_train is the unscaled model for every factor)."""
        if self.cfg.model.position.kind != "rope":
            return []
        rows: list[dict] = []
        L = self.cfg.train.length
        cache: dict[tuple, GradientFeatures] = {}

        def features(scaled: Transformer, length: int) -> GradientFeatures:
            rotary = scaled.position
            key = (length, *(np.asarray(x).tobytes() for x in jax.tree.leaves(rotary)))
            if key not in cache:
                if length == L:
                    cache[key] = self._features(scaled, self.probes.short)
                else:
                    cache[key] = self._long_features(scaled, length)
            return cache[key]

        for method in self.cfg.eval.methods:
            params = self.cfg.eval.params_for(method)
            for factor in self.cfg.eval.factors:
                short = features(with_scaling(model, method, factor, params, seq_len=L), L)
                K_train = total_kernel(feature_kernels(short, short))
                short_sq = np.diag(K_train)
                for length in self.probes.long:
                    scaled = with_scaling(model, method, factor, params, seq_len=length)
                    cross = long_cross(features(scaled, length), short, short_sq)
                    ratio = nm.cross_train_ratio(cross["cross"], K_train, cross["diag"])
                    cos = nm.cosine(cross["cross"], cross["diag"], short_sq)
                    for metric, value in (
                        ("k_cross_cos_mean", float(np.mean(cos))),
                        ("cross_train_cos_ratio", ratio["cos_offdiag_ratio"]),
                        ("cross_train_ratio", ratio["offdiag_ratio"]),
                        ("tail_cos_mean", float(np.mean(cross["tail_cos"]))),
                    ):
                        rows.append(_row(step, length, TOTAL, metric, value, method, factor))
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


def _cos(K: np.ndarray, sq1: np.ndarray, sq2: np.ndarray) -> np.ndarray:
    denom = np.sqrt(np.outer(sq1, sq2))
    return np.where(denom > 0, K / np.where(denom > 0, denom, 1), 0.0)


def long_cross(
    long: GradientFeatures, short: GradientFeatures, short_sq: np.ndarray
) -> dict[str, Any]:
    """Cross kernels of long probes (rows: whole output, tail) against short probes.

    Returns "groups" (per-group K_cross, (N_long, N_short)), "cross" (their total), "diag"
    (Theta(x, x) of each long probe, (N_long,)), and "tail_cos" / "head_cos": gradient cosines
    of the outputs at unseen (>= L_train) / trained positions against each short probe.
    """
    groups = feature_kernels(long, short)
    rows = total_kernel(groups).reshape(long.n, 2, -1)
    sq = np.asarray(long.sqnorms())
    head_sq = np.asarray(long.combine([[1.0, -1.0]]).sqnorms())[:, 0]
    tail = rows[:, 1]
    return {
        "groups": {g: k.reshape(long.n, 2, -1)[:, 0] for g, k in groups.items()},
        "cross": rows[:, 0],
        "diag": sq[:, 0],
        "tail_cos": _cos(tail, sq[:, 1], short_sq),
        "head_cos": _cos(rows[:, 0] - tail, head_sq, short_sq),
    }


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
        if state.step in (0, cfg.train.steps):
            rows += tracker.shift_invariance(state.model, state.step)
        if state.step == cfg.train.steps:
            rows += tracker.under_scalings(state.model, state.step)
            tracker.position_kernels(state.model)
        sink(state.step, rows)
        tracker.seconds += time.perf_counter() - start

    return Hook(every=1, fn=measure, at_start=True), tracker


__all__ = ["NTKTracker", "ProbeSets", "draw_probes", "ntk_steps", "readout", "tracking_hook"]

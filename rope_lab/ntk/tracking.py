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

The gradient pass's forward also gives the outputs F of every probe and mask row; they are
kept with the kernels (step 0's on disk, read back on resume like K_0) for the output metrics
(`rope_lab.ntk.predictions`: movement from step 0, kernel regression). With `ntk.nngp_samples`
the NNGP at initialisation is written with the first NTK step (`nngp`, `rope_lab.ntk.nngp`).
Every row carries `kernel`: "ntk", or "nngp" for the NNGP's.

Cost: each NTK step takes one gradient pass over the short probes and one over each long probe
set (two output masks, whole and tail, sharing a forward pass); every kernel and metric is a
contraction of those features. A trial's tracking, the position kernels and the RoPE scalings
included, compiles one gradient program per probe length; with `ntk.pad_to_longest` just one
(probes padded to the longest length: fewer compilations, which dominate tiny trials, for more
compute per NTK step). `rope_lab.ntk.plan` lists these steps and gradient passes without JAX
(the sweep plan counts their FLOPs from it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jax
import numpy as np

from rope_lab.config import TrialConfig, thaw
from rope_lab.hooks import Hook, StepState
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
from rope_lab.ntk.nngp import nngp_kernels, nngp_keys, probe_outputs
from rope_lab.ntk.plan import ntk_steps
from rope_lab.ntk.probes import ProbeSets, draw_probes, readout, target_values
from rope_lab.registry import NTK_METRICS
from rope_lab.runtime.atomic import atomic_write
from rope_lab.runtime.checked_files import read_npz
from rope_lab.tasks import Task
from rope_lab.trial.scaling_plan import Scaling

TOTAL = "total"
# `nm.Kernels` field -> kernels-file key of one long probe length
LONG_KEYS = {
    "K_cross": "cross{}/" + TOTAL,
    "diag_long": "diag{}",
    "tail_cos": "tailcos{}",
    "head_cos": "headcos{}",
    "K_tail": "tail{}/" + TOTAL,
    "out_long": "out{}",
}


@dataclass
class NTKTracker:
    """Measures kernels of a trial's model at its NTK steps; keeps K_0 and the last kernels.

    `folder` (optional) receives `ntk/kernels_<step>.npz`; on resume the reference kernels are
    read back from there, so drift metrics stay relative to step 0. `resume_step`: the step a
    resumed run restarts from; the previous kernels (velocity) are the last written at or
    before it, not those of later steps that an interrupted run measured past its last
    checkpoint and the resumed run measures again.
    """

    cfg: TrialConfig
    task: Task
    folder: Path | None = None
    probes: ProbeSets = field(init=False)
    output: str | jax.Array = field(init=False)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    previous: tuple[int, dict[str, np.ndarray]] | None = None
    seconds: float = 0.0
    resume_step: int | None = None

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
        if self.resume_step is not None:
            files = [f for f in files if int(f.stem.split("_")[1]) <= self.resume_step]
        if files:
            hint = f"the NTK cannot resume: delete {self.folder} and rerun the sweep to retrain it"
            self.initial = read_npz(files[0], hint=hint)
            self.previous = (int(files[-1].stem.split("_")[1]), read_npz(files[-1], hint=hint))

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
        out["out/train"] = np.asarray(short.values)  # F(x_short) (n, C)
        short_sq = np.diag(out[f"train/{TOTAL}"])
        for length in self.probes.long:
            long = self._long_features(model, length)
            t = cross_tail_kernels(long, short, short_sq)
            out |= {f"cross{length}/{g}": k for g, k in t["groups"].items()}
            fields = _cross_fields(t) | {"out_long": np.asarray(long.values).reshape(long.n, 2, -1)}
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

    def _rows(self, k: dict[str, np.ndarray], step: int, kernel: str = "ntk") -> list[dict]:
        """Metric rows of one step's kernels `k`: the "train" metrics of every group, then the
        "cross" metrics of every long probe length and group. `kernel` "nngp": `k` is the
        NNGP's (total only, no reference step), its rows the metrics registered with `nngp`."""
        L, ntk = self.cfg.train.length, kernel == "ntk"
        groups = [key.split("/")[1] for key in k if key.startswith("train/")]
        y = target_values(self.cfg, self.probes, self.output)
        prev_step, prev = self.previous if ntk and self.previous is not None else (step, {})
        init = self.initial if ntk else {}
        diag_short, ridge = np.diag(k[f"train/{TOTAL}"]), self.cfg.ntk.ridge
        out, out_0 = k.get("out/train"), init.get("out/train")

        def train(g: str) -> nm.Kernels:
            K_0, K_prev, dt = init.get(f"train/{g}"), prev.get(f"train/{g}"), step - prev_step
            kernels = nm.Kernels(k[f"train/{g}"], diag_short, K_0, K_prev, dt, y, ridge)
            return replace(kernels, out_short=out, out_short_0=out_0)

        base = {g: train(g) for g in groups}
        rows = [row for g in groups for row in _metric_rows("train", base[g], step, L, g, kernel)]
        no_output = 1 if isinstance(self.output, str) and self.output == "target" else 0
        for length in self.probes.long:
            long: dict[str, Any] = {f: k.get(key.format(length)) for f, key in LONG_KEYS.items()}
            for f in ("K_cross", "K_tail", "out_long"):
                long[f + "_0"] = init.get(LONG_KEYS[f].format(length))
            long["region_sizes"] = (L, length - L - no_output)
            for g in groups:
                long["K_cross"] = k[f"cross{length}/{g}"]
                rows += _metric_rows("cross", replace(base[g], **long), step, length, g, kernel)
        return rows

    def nngp(self) -> list[dict]:
        """Rows of the NNGP kernel at initialisation over `ntk.nngp_samples` fresh
        initialisations (`rope_lab.ntk.nngp`; none when 0): step 0, kernel "nngp", group
        total, the metrics registered with `nngp`; kernels saved as `ntk/nngp_kernels.npz`."""
        samples, L = self.cfg.ntk.nngp_samples, self.cfg.train.length
        if samples <= 0:
            return []
        keys = nngp_keys(self.cfg, samples)
        k = nngp_kernels(probe_outputs(self.cfg, self.probes, self.output, keys), self.probes.long)
        rows = self._rows(k, 0, kernel="nngp")
        K = k[f"train/{TOTAL}"]
        shift = nm.Kernels(K, np.diag(K), K_shift=k["shift/total"])
        rows += _metric_rows("shift", shift, 0, L, TOTAL, "nngp")
        if self.folder is not None:
            path = self.folder / "ntk" / "nngp_kernels.npz"
            atomic_write(path, lambda f: np.savez(f, **k))  # type: ignore[arg-type]
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
    kernel: str = "ntk",
) -> dict:
    """One long-format row of the `ntk` table (`kernel`: "ntk" or "nngp")."""
    return {
        "step": step,
        "probe_length": length,
        "group": group,
        "metric": metric,
        "value": float(value),
        "method": method,
        "factor": float(factor),
        "kernel": kernel,
    }


def _metric_rows(
    on: str, kernels: nm.Kernels, step: int, length: int, group: str, kernel: str = "ntk"
) -> list[dict]:
    """Rows of the registered metrics written on `on` rows for this group, in registry order
    (of the NNGP, `kernel` "nngp": those registered with `nngp`)."""
    rows = []
    for name, metric in NTK_METRICS.items():
        wanted = metric.nngp or kernel == "ntk"
        if wanted and metric.on == on and (metric.per_group or group == TOTAL):
            value = metric(kernels)
            if value is not None:
                rows.append(_row(step, length, group, name, value, kernel=kernel))
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
        "K_tail": t["tail"],
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
    tracker = NTKTracker(cfg, task, folder, resume_step=done_steps)
    wanted = {s for s in tracker.steps if s > done_steps or (s == 0 and done_steps == 0)}
    first = min(wanted) if wanted and done_steps == 0 else None  # the NNGP's rows come with it

    def measure(state: StepState) -> None:
        if state.step not in wanted:
            return
        start = time.perf_counter()
        rows = tracker.measure(state.model, state.step)
        if state.step == first:
            rows += tracker.nngp()
        if state.step in (0, cfg.train.steps):
            rows += tracker.shift_invariance(state.model, state.step)
        if state.step == cfg.train.steps:
            tracker.position_kernels(state.model)
        sink(state.step, rows)
        tracker.seconds += time.perf_counter() - start

    return Hook(every=1, fn=measure, at_start=True, steps=frozenset(wanted)), tracker


__all__ = ["NTKTracker", "ProbeSets", "draw_probes", "ntk_steps", "readout", "tracking_hook"]

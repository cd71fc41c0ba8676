"""Every number the NTK tracker writes, recomputed by an independent path.

A tracker runs on a tiny model through `tracking_hook` at three steps (the model perturbed
between them), exactly as the train stage calls it. Each row of the `ntk` table (and each
position kernel saved at the end) is recomputed from brute-force Jacobians (`jax.jacrev` of the
logits over the flattened trainable parameters, outputs f_i taken from them in NumPy) and plain
NumPy formulas written from the definitions. The formulas are a table keyed by metric name: a
metric the tracker writes without an entry there fails the test. The NNGP's rows (kernel "nngp")
go through the same formulas: its "Jacobian" is the outputs f_{k,c,i}(x) of K initialisations
built one by one in a Python loop over their keys, divided by sqrt(K), so that every Gram matrix
of it is the sample mean over initialisations of f(x) f(x')^T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

from rope_lab.config import TrialConfig, replace
from rope_lab.hooks import StepState
from rope_lab.model.factory import make_model as make_model_from_key
from rope_lab.model.transformer import trainable, with_scaling
from rope_lab.ntk import kernels as ntk
from rope_lab.ntk.plan import measures_under
from rope_lab.ntk.tracking import ProbeSets, tracking_hook
from rope_lab.registry import NTK_METRICS, POSITIONS
from rope_lab.registry import SCALINGS as SCALING_METHODS
from rope_lab.trial.scaling_plan import scalings_for
from rope_lab.trial.train import make_model, make_task_from
from tests.helpers import tiny_trial
from tests.ntk.test_kernels import brute_groups, logit_jacobian, output_jacobian

L, LONG, STEPS = 8, 16, (0, 2, 6)
TOTAL = "total"
ALL_GROUPS = (TOTAL, *ntk.GROUPS)


def first_scaling(length_dependent: bool) -> str:
    """The first registered scaling method with a factor whose frequencies do (or do not)
    depend on the sequence length."""
    methods = SCALING_METHODS.items()
    return next(k for k, c in methods if c.uses_factor and c.length_dependent is length_dependent)


# The eval scalings whose NTK rows are checked, one with fixed frequencies and one rebuilt at
# each probe length: the tracker applies every method alike, only that step differs.
SCALINGS = (first_scaling(False), first_scaling(True))
TRIALS = {  # name: (position kind, config changes)
    "rope-random": ("rope", {"ntk.output": "random", "ntk.nngp_samples": 3}),
    "learned-target-padded": (
        "learned",
        {"ntk.output": "target", "ntk.pad_to_longest": True, "ntk.nngp_samples": 2},
    ),
}


def trial_config(kind: str, changes: dict) -> TrialConfig:
    """Width 16, depth 1, L_train 8, 8 probes at 8 and 16, NTK steps 0, 2, 6 (the last)."""
    cfg = tiny_trial(kind, width=16, depth=1, head_dim=8, length=L, steps=STEPS[-1])
    return replace(
        cfg,
        **{
            "ntk.probes": 8,
            "ntk.position_probes": 2,
            "ntk.chunk_size": 8,
            "ntk.steps": STEPS,
            "ntk.probe_multipliers": (LONG / L,),
            "eval.methods": SCALINGS,
            "eval.factors": (2.0,),
            **changes,
        },
    )


def perturbed(model, seed: int, scale: float = 0.05):
    """The model with Gaussian noise of std `scale` added to every trainable leaf."""
    params, static = eqx.partition(model, trainable(model))
    rng = np.random.default_rng(seed)
    noisy = jax.tree.map(lambda x: x + scale * rng.normal(size=x.shape).astype(x.dtype), params)
    return eqx.combine(noisy, static)


@dataclass
class Run:
    """A tracker's rows and saved position kernels, with the brute-force per-position output
    Jacobians (N, L, C, P) of its probes under every model it measured."""

    cfg: TrialConfig
    rows: list[dict]
    position_kernels: dict[str, np.ndarray]
    cols: dict[str, np.ndarray]  # group -> (P,) bool
    y: np.ndarray | None  # alignment targets of the short probes
    output: object  # the readout: u (V,), "trace" or "target"
    probes: ProbeSets
    models: dict[int, object]  # step -> measured model
    short: dict[tuple, np.ndarray] = field(default_factory=dict)  # view -> J
    long: dict[tuple, np.ndarray] = field(default_factory=dict)  # (view, length) -> J
    shifted: dict[tuple, np.ndarray] = field(default_factory=dict)  # (step, kernel) -> J, pos + L
    # per-position outputs f (N, L, C): view -> short probes, (view, length) -> long probes
    out_short: dict[tuple, np.ndarray] = field(default_factory=dict)
    out_long: dict[tuple, np.ndarray] = field(default_factory=dict)
    memo: dict[tuple, np.ndarray] = field(default_factory=dict)

    def jacobian(self, model, tokens, positions=None) -> np.ndarray:
        """Brute-force per-position output Jacobian (N, L, C, P), kept in float32 (its
        precision)."""
        J = logit_jacobian(model, tokens, positions)
        return output_jacobian(J, tokens, self.output).astype(np.float32)

    def outputs(self, model, tokens, positions=None) -> np.ndarray:
        """Per-position outputs f (N, L, C) by the definitions, from one forward pass."""
        tokens = np.asarray(tokens, np.int32)
        pos = np.arange(tokens.shape[1]) if positions is None else np.asarray(positions)
        pos = np.broadcast_to(pos, tokens.shape).astype(np.int32)
        with jax.default_matmul_precision("highest"):
            logits = np.asarray(model(jax.numpy.asarray(tokens), jax.numpy.asarray(pos)))
        return output_jacobian(logits[..., None].astype(np.float64), tokens, self.output)[..., 0]

    # --- kernels from the Jacobians (memoised: many rows share one kernel) --------------------
    def _memo(self, key: tuple, compute) -> np.ndarray:
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def grad_f(self, J: np.ndarray, positions=slice(None)) -> np.ndarray:
        """Gradients of F = sum_i f_i over the given positions: (N, C, P), float64."""
        return J[:, positions].sum(1, dtype=np.float64)

    def gram(self, a: np.ndarray, b: np.ndarray, group: str) -> np.ndarray:
        """<grad a_n, grad b_m> over the group's parameters (all of them for the total, which
        is also the NNGP's one group): (N_a, N_b)."""
        cols = slice(None) if group == TOTAL else self.cols[group]
        return np.einsum("ncp,mcp->nm", a[..., cols], b[..., cols])

    def k_train(self, view: tuple, group: str = TOTAL) -> np.ndarray:
        def compute():
            g = self.grad_f(self.short[view])
            return self.gram(g, g, group)

        return self._memo(("train", view, group), compute)

    def k_cross(self, view: tuple, length: int, group: str = TOTAL) -> np.ndarray:
        def compute():
            long, short = self.grad_f(self.long[view, length]), self.grad_f(self.short[view])
            return self.gram(long, short, group)

        return self._memo(("cross", view, length, group), compute)

    def diag_long(self, view: tuple, length: int) -> np.ndarray:
        def compute():
            g = self.grad_f(self.long[view, length])
            return np.einsum("ncp,ncp->n", g, g)

        return self._memo(("diag", view, length), compute)

    def part_cos(self, view: tuple, length: int, positions: slice) -> np.ndarray:
        """Cosines of grad F_part(x_long) (outputs at `positions`) with grad F(x_short)."""

        def compute():
            part = self.grad_f(self.long[view, length], positions)
            return cosines(part, self.grad_f(self.short[view]))

        return self._memo(("part", view, length, positions.start, positions.stop), compute)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """<a_n, b_m> / (|a_n| |b_m|) for gradients a (N, C, P), b (M, C, P)."""
    dot = np.einsum("ncp,mcp->nm", a, b)
    return dot / np.outer(np.linalg.norm(a, axis=(1, 2)), np.linalg.norm(b, axis=(1, 2)))


def view_of(row: dict) -> tuple:
    """The kernel a row belongs to: (step, method, factor, kernel)."""
    return (row["step"], row["method"], row["factor"], row["kernel"])


KEY_COLUMNS = ("step", "probe_length", "group", "metric", "method", "factor", "kernel")


def row_key(row: dict) -> tuple:
    """(step, probe_length, group, metric, method, factor, kernel)."""
    return tuple(row[c] for c in KEY_COLUMNS)


def nngp_jacobians(run: Run, tokens, positions=None) -> np.ndarray:
    """The NNGP's "Jacobian" (N, L, C, K) of tokens: the outputs of K = ntk.nngp_samples fresh
    initialisations, one model per key in a Python loop, keys fold_in(fold_in(PRNGKey(
    train.seed), 2), k), divided by sqrt(K)."""
    K = run.cfg.ntk.nngp_samples
    base = jax.random.fold_in(jax.random.PRNGKey(run.cfg.train.seed), 2)
    outs = []
    for k in range(K):
        model = make_model_from_key(run.cfg, key=jax.random.fold_in(base, k))
        outs.append(run.outputs(model, tokens, positions))
    return np.stack(outs, axis=-1) / np.sqrt(K)


def tracker_run(name: str, folder: Path) -> Run:
    """Run the tracking hook at STEPS and compute the brute-force Jacobians of every view."""
    kind, changes = TRIALS[name]
    cfg = trial_config(kind, changes)
    task = make_task_from(cfg)
    rows: list[dict] = []
    hook, tracker = tracking_hook(cfg, task, lambda _, r: rows.extend(r), folder=folder)
    model0 = make_model(cfg)
    models = {s: model0 if s == 0 else perturbed(model0, s) for s in STEPS}
    for step in STEPS:
        hook.fn(StepState(step, models[step], None, []))
    # the scaling stages' rows: K_cross under each RoPE scaling at the last step
    scaled = [s for s in scalings_for(cfg)[1:] if measures_under(cfg, s)]
    rows += tracker.under_scalings(models[STEPS[-1]], STEPS[-1], scaled)
    with np.load(folder / "ntk" / "position_kernels.npz") as f:
        saved = dict(f)

    probes, vocab = tracker.probes, cfg.task.vocab_size
    if cfg.ntk.output == "random":  # the readout: a Gaussian u (V,) seeded by ntk.seed + 1
        output = np.asarray(jax.random.normal(jax.random.PRNGKey(cfg.ntk.seed + 1), (vocab,)))
        # a perfect model's readout on each short probe: sum over scored positions of
        # <u, onehot(target)> / sqrt(V)
        y = np.array(
            [
                sum(output[t] for t, m in zip(tg, mk, strict=True) if m) / math.sqrt(vocab)
                for tg, mk in zip(probes.short_targets, probes.short_mask, strict=True)
            ]
        )
    else:
        output, y = cfg.ntk.output, None
    names = brute_groups(model0)
    cols = {g: names == g for g in ntk.GROUPS} | {TOTAL: np.ones(names.size, bool)}
    run = Run(cfg, rows, saved, cols, y, output, probes, models)
    jac = run.jacobian

    lengths = sorted(probes.long)
    for step, model in models.items():
        view = (step, "none", 1.0, "ntk")
        run.short[view] = jac(model, probes.short)
        run.out_short[view] = run.outputs(model, probes.short)
        for length in lengths:
            run.long[view, length] = jac(model, probes.long[length])
            run.out_long[view, length] = run.outputs(model, probes.long[length])
        if step in (STEPS[0], STEPS[-1]):
            run.shifted[step, "ntk"] = jac(model, probes.short, np.arange(L) + L)
    if cfg.ntk.nngp_samples:
        view = (0, "none", 1.0, "nngp")
        run.short[view] = nngp_jacobians(run, probes.short)
        run.shifted[0, "nngp"] = nngp_jacobians(run, probes.short, np.arange(L) + L)
        for length in lengths:
            run.long[view, length] = nngp_jacobians(run, probes.long[length])
    if kind == "rope":
        last = models[STEPS[-1]]
        for method in cfg.eval.methods:
            params = cfg.eval.params_for(method)
            for factor in cfg.eval.factors:
                view = (STEPS[-1], method, factor, "ntk")
                # each probe set under the scaling at its own length
                run.short[view] = jac(
                    with_scaling(last, method, factor, params, seq_len=L), probes.short
                )
                for length in lengths:
                    scaled = with_scaling(last, method, factor, params, seq_len=length)
                    run.long[view, length] = jac(scaled, probes.long[length])
    return run


# --- formulas from the definitions -----------------------------------------------------------
def offdiag_mean(A: np.ndarray) -> float:
    """Mean over i != j."""
    return float(A[~np.eye(A.shape[0], dtype=bool)].mean())


def self_cos(K: np.ndarray) -> np.ndarray:
    d = np.sqrt(np.diag(K))
    return K / np.outer(d, d)


def cross_cos(run: Run, view: tuple, length: int) -> np.ndarray:
    d_long, d_short = run.diag_long(view, length), np.diag(run.k_train(view))
    return run.k_cross(view, length) / np.sqrt(np.outer(d_long, d_short))


def fro_distance(A: np.ndarray, B: np.ndarray) -> float:
    """1 - <A, B>_F / (|A|_F |B|_F)."""
    return 1.0 - float(np.sum(A * B) / np.sqrt(np.sum(A * A) * np.sum(B * B)))


def rel_change(A: np.ndarray, B: np.ndarray) -> float:
    """|A - B|_F / |B|_F."""
    return float(np.sqrt(np.sum((A - B) ** 2) / np.sum(B * B)))


def eigs_desc(K: np.ndarray) -> np.ndarray:
    return np.sort(np.linalg.eigvalsh(K))[::-1]


def effective_rank(K: np.ndarray) -> float:
    """exp(-sum p log p), p the eigenvalues (negatives set to 0) over their sum."""
    lam = np.maximum(eigs_desc(K), 0.0)
    p = lam[lam > 0] / lam.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def alignment(K: np.ndarray, y: np.ndarray) -> float:
    """<H K H, y_c y_c^T>_F / (|H K H|_F |y_c y_c^T|_F), H = I - 11^T / n."""
    n = len(y)
    H = np.eye(n) - np.ones((n, n)) / n
    Kc, yc = H @ K @ H, y - y.mean()
    Y = np.outer(yc, yc)
    return float(np.sum(Kc * Y) / (np.linalg.norm(Kc) * np.linalg.norm(Y)))


def coverage_mean(run: Run, view: tuple, length: int) -> float:
    """mean over long probes x of k_x^T (K_train + lam I)^-1 k_x / Theta(x, x), the ridge lam =
    ntk.ridge x the mean diagonal of K_train."""
    Kt, Kc = run.k_train(view), run.k_cross(view, length)
    lam = run.cfg.ntk.ridge * np.mean(np.diag(Kt))
    explained = np.einsum("mn,nm->m", Kc, np.linalg.solve(Kt + lam * np.eye(len(Kt)), Kc.T))
    return float(np.mean(explained / run.diag_long(view, length)))


def previous_step(step: int) -> int:
    return STEPS[STEPS.index(step) - 1]


def k_train_of(run: Run, row: dict, step: int | None = None) -> np.ndarray:
    view = view_of(row) if step is None else (step, "none", 1.0, "ntk")
    return run.k_train(view, row["group"])


# --- the network's outputs and kernel regression ---------------------------------------------
def region_sums(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Outputs (N, L', C) summed over the in-range positions i < L and the tail i >= L."""
    return f[:, :L].sum(1), f[:, L:].sum(1)


def region_sizes(run: Run, length: int) -> tuple[int, int]:
    """Positions with an output in range and in the tail ("target": none at the last)."""
    return L, length - L - (1 if isinstance(run.output, str) and run.output == "target" else 0)


def moved(run: Run, row: dict) -> tuple[np.ndarray, np.ndarray]:
    """The network's in-range and tail movement from step 0 at the long probes: (m, C) each."""
    length, first = row["probe_length"], (STEPS[0], "none", 1.0, "ntk")
    (h, t), (h0, t0) = (region_sums(run.out_long[v, length]) for v in (view_of(row), first))
    return h - h0, t - t0


def kernel_moved(run: Run, row: dict, theta_step: int) -> tuple[np.ndarray, np.ndarray]:
    """Kernel regression with the kernel at `theta_step`: Theta(x, X)(Theta(X, X) + lam I)^-1
    (F_t(X) - F_0(X)) for x the in-range and the tail outputs of the long probes, lam =
    ntk.ridge x mean diag Theta(X, X); Theta(x, X) from the gradients of those positions."""
    view, first = (theta_step, "none", 1.0, "ntk"), (STEPS[0], "none", 1.0, "ntk")
    length = row["probe_length"]
    J_short, J_long = run.short[view], run.long[view, length]
    g_short = run.grad_f(J_short)
    K = run.gram(g_short, g_short, TOTAL)
    head = run.gram(run.grad_f(J_long, slice(None, L)), g_short, TOTAL)
    tail = run.gram(run.grad_f(J_long, slice(L, None)), g_short, TOTAL)
    delta = run.out_short[view_of(row)].sum(1) - run.out_short[first].sum(1)  # (n, C)
    lam = run.cfg.ntk.ridge * np.mean(np.diag(K))
    alpha = np.linalg.solve(K + lam * np.eye(len(K)), delta)
    return head @ alpha, tail @ alpha


def mean_abs_ratio(run: Run, row: dict, head: np.ndarray, tail: np.ndarray) -> float:
    """mean |tail| / n_tail over mean |head| / n_head (region means of the movements)."""
    n_head, n_tail = region_sizes(run, row["probe_length"])
    return float(np.mean(np.abs(tail)) / n_tail / (np.mean(np.abs(head)) / n_head))


def prediction_error(run: Run, row: dict, theta_step: int) -> float:
    """|kernel-predicted tail - network tail|_2 / |network tail movement|_2."""
    _, predicted = kernel_moved(run, row, theta_step)
    _, actual = moved(run, row)
    return float(np.linalg.norm(predicted - actual) / np.linalg.norm(actual))


def eig_formula(k: int):
    return lambda run, row: eigs_desc(run.k_train(view_of(row)))[k - 1]


# metric -> (value from the brute-force Jacobians, absolute tolerance in units of `scale`)
FORMULAS = {
    "k_train_mean": (lambda run, r: offdiag_mean(k_train_of(run, r)), "kernel"),
    "k_train_cos_mean": (lambda run, r: offdiag_mean(self_cos(run.k_train(view_of(r)))), 1e-6),
    "distance_from_init": (
        lambda run, r: fro_distance(k_train_of(run, r), k_train_of(run, r, STEPS[0])),
        1e-6,
    ),
    "relative_change": (
        lambda run, r: rel_change(k_train_of(run, r), k_train_of(run, r, STEPS[0])),
        1e-6,
    ),
    "velocity": (
        lambda run, r: (
            fro_distance(k_train_of(run, r, previous_step(r["step"])), k_train_of(run, r))
            / (r["step"] - previous_step(r["step"]))
        ),
        1e-6,
    ),
    **{f"eig_{k}": (eig_formula(k), "kernel") for k in range(1, 6)},
    "effective_rank": (lambda run, r: effective_rank(run.k_train(view_of(r))), 1e-6),
    "alignment": (lambda run, r: alignment(run.k_train(view_of(r)), run.y), 1e-6),
    "k_cross_mean": (
        lambda run, r: float(np.mean(run.k_cross(view_of(r), r["probe_length"], r["group"]))),
        "kernel",
    ),
    "cross_train_ratio": (
        lambda run, r: (
            float(np.mean(run.k_cross(view_of(r), r["probe_length"], r["group"])))
            / offdiag_mean(k_train_of(run, r))
        ),
        1e-5,
    ),
    "k_cross_cos_mean": (
        lambda run, r: float(np.mean(cross_cos(run, view_of(r), r["probe_length"]))),
        1e-6,
    ),
    "cross_train_cos_ratio": (
        lambda run, r: (
            float(np.mean(cross_cos(run, view_of(r), r["probe_length"])))
            / offdiag_mean(self_cos(run.k_train(view_of(r))))
        ),
        1e-5,
    ),
    "coverage_mean": (lambda run, r: coverage_mean(run, view_of(r), r["probe_length"]), 1e-5),
    "tail_cos_mean": (
        lambda run, r: float(np.mean(run.part_cos(view_of(r), r["probe_length"], slice(L, None)))),
        1e-6,
    ),
    "head_cos_mean": (
        lambda run, r: float(np.mean(run.part_cos(view_of(r), r["probe_length"], slice(None, L)))),
        1e-6,
    ),
    "shift_invariance_error": (
        lambda run, r: rel_change(
            run.gram(*(2 * [run.grad_f(run.shifted[r["step"], r["kernel"]])]), r["group"]),
            k_train_of(run, r),
        ),
        1e-5,
    ),
    "tail_movement": (lambda run, r: mean_abs_ratio(run, r, *moved(run, r)), 1e-6),
    "kernel_prediction_error": (lambda run, r: prediction_error(run, r, r["step"]), 1e-6),
    "kernel_prediction_error_init": (lambda run, r: prediction_error(run, r, STEPS[0]), 1e-6),
    "kernel_tail_collapse": (
        lambda run, r: mean_abs_ratio(run, r, *kernel_moved(run, r, r["step"])),
        1e-6,
    ),
    "kernel_tail_collapse_init": (
        lambda run, r: mean_abs_ratio(run, r, *kernel_moved(run, r, STEPS[0])),
        1e-6,
    ),
}
OUTPUT_METRICS = (
    "tail_movement",
    "kernel_prediction_error",
    "kernel_prediction_error_init",
    "kernel_tail_collapse",
    "kernel_tail_collapse_init",
)


def expected_keys(run: Run) -> set[tuple]:
    """The rows a tracker writes over STEPS, as row keys: per step, K_train metrics for every
    group at L_train, K_cross metrics for every group at each long length, total-only metrics,
    the output metrics after the first step (at step 0 nothing has moved: 0 / 0, no row),
    shift-invariance errors at the first and last step, and at the last step the RoPE-scaling
    rows for every eval method and factor; with ntk.nngp_samples, the NNGP's rows at step 0
    (total, the metrics that make sense at initialisation)."""
    cfg, lengths = run.cfg, cfg_lengths(run.cfg)
    n_eig = min(5, cfg.ntk.probes)
    keys = set()

    def add(step, length, groups, metrics, method="none", factor=1.0, kernel="ntk"):
        keys.update((step, length, g, m, method, factor, kernel) for g in groups for m in metrics)

    for i, step in enumerate(STEPS):
        add(step, L, ALL_GROUPS, ("k_train_mean", "distance_from_init", "relative_change"))
        totals = ["k_train_cos_mean", "effective_rank"] + [f"eig_{k}" for k in range(1, n_eig + 1)]
        totals += ["velocity"] if i > 0 else []
        totals += ["alignment"] if run.y is not None else []
        add(step, L, [TOTAL], totals)
        for length in lengths:
            add(step, length, ALL_GROUPS, ("k_cross_mean", "cross_train_ratio"))
            cross = ("cross_train_cos_ratio", "k_cross_cos_mean", "coverage_mean")
            add(step, length, [TOTAL], (*cross, "tail_cos_mean", "head_cos_mean"))
            add(step, length, [TOTAL], OUTPUT_METRICS if i > 0 else ())
        if step in (STEPS[0], STEPS[-1]):
            add(step, L, ALL_GROUPS, ["shift_invariance_error"])
    if cfg.ntk.nngp_samples:
        train = ["k_train_mean", "k_train_cos_mean", "effective_rank", "shift_invariance_error"]
        train += [f"eig_{k}" for k in range(1, n_eig + 1)]
        train += ["alignment"] if run.y is not None else []
        add(0, L, [TOTAL], train, kernel="nngp")
        cross = ["k_cross_mean", "cross_train_ratio", "cross_train_cos_ratio", "k_cross_cos_mean"]
        cross += ["coverage_mean", "tail_cos_mean", "head_cos_mean"]
        for length in lengths:
            add(0, length, [TOTAL], cross, kernel="nngp")
    if POSITIONS[cfg.model.position.kind].supports_scaling:
        scaled = ("k_cross_cos_mean", "cross_train_cos_ratio", "cross_train_ratio", "tail_cos_mean")
        for method in cfg.eval.methods:
            for factor in cfg.eval.factors:
                for length in lengths:
                    add(STEPS[-1], length, [TOTAL], scaled, method, factor)
    return keys


def cfg_lengths(cfg: TrialConfig) -> list[int]:
    return sorted(round(m * cfg.train.length) for m in cfg.ntk.probe_multipliers)


_RUNS: dict[str, Run] = {}


def tracked(name: str, tmp_path_factory) -> Run:
    """The run of TRIALS[name], computed once per session."""
    if name not in _RUNS:
        _RUNS[name] = tracker_run(name, tmp_path_factory.mktemp(name))
    return _RUNS[name]


# rope-random by default (the dynamic-scaling test below tracks it too); the learned trial
# (target readout, padded probes) -m slow: each tracked trial takes seconds
@pytest.fixture(
    params=[n if n == "rope-random" else pytest.param(n, marks=pytest.mark.slow) for n in TRIALS]
)
def run(request, tmp_path_factory) -> Run:
    """One tracked trial per TRIALS entry, with its brute-force Jacobians."""
    return tracked(request.param, tmp_path_factory)


def test_every_metric_has_an_independent_formula_and_the_rows_are_complete(run):
    """No metric without an entry in FORMULAS, no duplicate row, and exactly the rows the
    tracker's definition lists (every group, probe length, step and RoPE scaling)."""
    unchecked = {r["metric"] for r in run.rows} - FORMULAS.keys()
    assert not unchecked, f"metrics without an independent check: {sorted(unchecked)}"
    keys = [row_key(r) for r in run.rows]
    assert len(keys) == len(set(keys))
    expected = expected_keys(run)
    assert set(keys) == expected, (set(keys) - expected, expected - set(keys))


def test_every_registered_metric_has_a_formula():
    """Also a registered metric that no row of these runs writes needs its FORMULAS entry."""
    missing = set(NTK_METRICS.names()) - FORMULAS.keys()
    assert not missing, f"registered metrics without an independent check: {sorted(missing)}"


def test_every_row_equals_its_bruteforce_value(run):
    """Each row's value equals its FORMULAS entry evaluated on brute-force Jacobians (rtol 1e-4;
    the absolute tolerance is per metric, in units of the mean K_train diagonal for kernels)."""
    wrong = []
    for r in run.rows:
        formula, atol = FORMULAS[r["metric"]]
        expected = formula(run, r)
        if atol == "kernel":
            atol = 1e-5 * float(np.mean(np.diag(k_train_of(run, r))))
        if not abs(r["value"] - expected) <= 1e-4 * abs(expected) + atol:
            wrong.append((row_key(r), r["value"], expected))
    assert not wrong, (sorted({key[3] for key, *_ in wrong}), wrong[:10])


def test_saved_position_kernels_equal_bruteforce(run):
    """The position kernels at the last step: probe-averaged per-position gradients
    gbar_i = mean_a grad f_i(x_a) over the first ntk.position_probes probes; K_train_ij =
    <gbar_i, gbar_j> (L, L), K_cross against the longest probes (L, L_long), profile its
    column means."""
    n, view, longest = (
        run.cfg.ntk.position_probes,
        (STEPS[-1], "none", 1.0, "ntk"),
        cfg_lengths(run.cfg)[-1],
    )
    short = run.short[view][:n].mean(0)
    long = run.long[view, longest][:n].mean(0)
    K_train = np.einsum("icp,jcp->ij", short, short)
    K_cross = np.einsum("icp,jcp->ij", short, long)
    saved = run.position_kernels
    atol = 1e-5 * np.abs(K_train).max()
    np.testing.assert_allclose(saved["K_train"], K_train, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(saved["K_cross"], K_cross, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(saved["profile"], K_cross.mean(0), rtol=1e-4, atol=atol)
    assert int(saved["train_length"]) == L
    np.testing.assert_array_equal(saved["positions"], np.arange(longest))


def test_dynamic_scaling_rows_are_taken_at_the_probe_length(tmp_path_factory):
    """Dynamic NTK scaling depends on the sequence length: at the long probes' length (> L_train)
    its frequencies differ from those at L_train, and so does the scaled cross kernel, so the
    rows above pin the length the scaling is taken at."""
    run = tracked("rope-random", tmp_path_factory)
    last, params = run.models[STEPS[-1]], run.cfg.eval.params_for("dynamic")
    at_train = with_scaling(last, "dynamic", 2.0, params, seq_len=L)
    at_long = with_scaling(last, "dynamic", 2.0, params, seq_len=LONG)
    assert np.abs(at_train.position.inv_freq.value - at_long.position.inv_freq.value).max() > 1e-3
    view = (STEPS[-1], "dynamic", 2.0, "ntk")
    wrong = cosines(
        run.grad_f(run.jacobian(at_train, run.probes.long[LONG])), run.grad_f(run.short[view])
    )
    (row,) = [r for r in run.rows if r["metric"] == "k_cross_cos_mean" and r["method"] == "dynamic"]
    assert abs(row["value"] - wrong.mean()) > 1e-3

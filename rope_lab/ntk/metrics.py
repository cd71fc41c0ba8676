"""Metrics on empirical NTK matrices (pure functions, numpy float64) and the metrics the NTK
tracker writes, registered in `NTK_METRICS` (bottom of this module). Metrics that compute
their own kernels (the shift-invariance error, the tail kernel) live in `rope_lab.ntk.kernels`.

Conventions: K_train = Theta(D_short, D_short) (n, n), K_cross = Theta(D_long, D_short)
(m, n); `diag_long` (m,) and `diag_short` (n,) are the diagonals of the two self-kernels
(Theta(x, x)), needed to normalise a cross kernel to cosines.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from rope_lab.registry import NTK_METRICS

STAT_KEYS = ("mean", "var", "offdiag_mean", "cos_mean", "cos_var")


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def cosine(K, diag1, diag2) -> np.ndarray:
    """K_ij / sqrt(diag1_i diag2_j): (m, n) from K (m, n), diag1 (m,), diag2 (n,); 0 where a
    diagonal entry is 0."""
    K, d1, d2 = _f64(K), _f64(diag1), _f64(diag2)
    denom = np.sqrt(np.clip(np.outer(d1, d2), 0.0, None))
    return np.where(denom > 0, K / np.where(denom > 0, denom, 1.0), 0.0)


def _offdiag_mean(K: np.ndarray) -> float:
    n = K.shape[0]
    return float((K.sum() - np.trace(K)) / (n * (n - 1))) if n > 1 else math.nan


def kernel_stats(K, diag1=None, diag2=None) -> dict[str, float]:
    """Mean, variance and off-diagonal mean of K (m, n), and the mean and variance of its
    cosine version.

    A self-kernel (square, no diagonals given) is normalised by its own diagonal and reports
    its off-diagonal mean (its cosines' is the tracked `k_train_cos_mean`). A cross kernel
    needs `diag1` (m,) and `diag2` (n,) (the self-kernel diagonals) for the cosine entries (NaN
    without them); its off-diagonal mean is NaN. Keys: STAT_KEYS.
    """
    K = _f64(K)
    is_self = diag1 is None and diag2 is None and K.ndim == 2 and K.shape[0] == K.shape[1]
    stats = {"mean": float(K.mean()), "var": float(K.var())}
    stats["offdiag_mean"] = _offdiag_mean(K) if is_self else math.nan
    if is_self:
        diag1 = diag2 = np.diag(K)
    if diag1 is None or diag2 is None:
        return stats | {"cos_mean": math.nan, "cos_var": math.nan}
    C = cosine(K, diag1, diag2)
    return stats | {"cos_mean": float(C.mean()), "cos_var": float(C.var())}


def cross_train_ratio(K_cross, K_train, diag_long=None, diag_short=None) -> dict[str, float]:
    """mean(K_cross) / mean(K_train) for K_cross (m, n), K_train (n, n).

    Keys: "mean_ratio", "offdiag_ratio" (over the off-diagonal mean of K_train), and with
    `diag_long` (m,) (diag_short defaults to diag(K_train)) the same for cosines:
    "cos_mean_ratio", "cos_offdiag_ratio" (NaN without diag_long).

    Across probe lengths compare only the cosine ratios: the raw ratios grow with the long
    probe's length, because the gradient norm of F = sum_i f_i grows with the number of summed
    positions (K_cross scales with |grad F(long)|), whatever the encoding does. So the tracked
    `cross_train_ratio` rises with probe_length by construction; `cross_train_cos_ratio`
    (and `k_cross_cos_mean`, `tail_cos_mean`) divide the norms out.
    """
    Kc, Kt = _f64(K_cross), _f64(K_train)
    out = {"mean_ratio": Kc.mean() / Kt.mean(), "offdiag_ratio": Kc.mean() / _offdiag_mean(Kt)}
    out |= {"cos_mean_ratio": math.nan, "cos_offdiag_ratio": math.nan}
    if diag_long is not None:
        d_short = np.diag(Kt) if diag_short is None else diag_short
        Cc, Ct = cosine(Kc, diag_long, d_short), cosine(Kt, d_short, d_short)
        out["cos_mean_ratio"] = Cc.mean() / Ct.mean()
        out["cos_offdiag_ratio"] = Cc.mean() / _offdiag_mean(Ct)
    return {k: float(v) for k, v in out.items()}


def kernel_distance(K1, K2) -> float:
    """Fort et al. (2020): 1 - <K1, K2>_F / (|K1|_F |K2|_F), in [0, 2]; 0 for K2 = c K1, c > 0."""
    a, b = _f64(K1), _f64(K2)
    cos = np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.clip(1.0 - cos, 0.0, 2.0))


def kernel_velocity(K_t, K_t2, dt: float) -> float:
    """kernel_distance(K_t, K_{t+dt}) / dt."""
    return kernel_distance(K_t, K_t2) / dt


def relative_change(K_t, K_0) -> float:
    """|K_t - K_0|_F / |K_0|_F."""
    a, b = _f64(K_t), _f64(K_0)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def eigenvalues(K) -> np.ndarray:
    """Eigenvalues of the symmetric part of K (n, n), descending."""
    K = _f64(K)
    return np.linalg.eigvalsh((K + K.T) / 2)[::-1]


def top_eigenvalues(K, k: int) -> np.ndarray:
    """The k largest eigenvalues of K (n, n), descending: (min(k, n),)."""
    return eigenvalues(K)[:k]


def effective_rank(K) -> float:
    """exp(entropy of the eigenvalues normalised to sum 1); tiny negatives clipped to 0."""
    lam = np.clip(eigenvalues(K), 0.0, None)
    if lam.sum() <= 0:
        return 0.0
    p = lam / lam.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def coverage(k_x, K_train, theta_xx, lam: float):
    """k_x^T (K_train + lam I)^-1 k_x / Theta(x, x): how much of phi(x) the training span explains.

    k_x (n,) or (m, n) (rows of K_cross), K_train (n, n), theta_xx scalar or (m,) (diag_long),
    lam >= 0 a ridge (absolute units of K). In [0, 1] for a PSD kernel on the joint set; a scalar
    for one probe, (m,) for many.
    """
    k, Kt = _f64(k_x), _f64(K_train)
    single = k.ndim == 1
    k = np.atleast_2d(k)
    evals, evecs = np.linalg.eigh((Kt + Kt.T) / 2)
    evals = np.clip(evals, 0.0, None)
    keep = evals + lam > max(1e-12 * evals.max(initial=0.0), 0.0)  # lam = 0: pseudo-inverse
    inv = np.where(keep, 1.0 / np.where(keep, evals + lam, 1.0), 0.0)
    proj = k @ evecs  # (m, n)
    explained = np.sum(proj * proj * inv[None, :], axis=1)
    theta = np.broadcast_to(_f64(theta_xx), explained.shape)
    out = np.where(theta > 0, explained / np.where(theta > 0, theta, 1.0), 0.0)
    return float(out[0]) if single else out


def kernel_target_alignment(K, y) -> float:
    """Centred alignment (Cortes et al. 2012): <H K H, y_c y_c^T>_F / (|H K H|_F |y_c y_c^T|_F).

    K (n, n), y (n,); H = I - 11^T / n, y_c = y - mean(y).
    """
    K, y = _f64(K), _f64(y)
    Kc = K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean()
    yc = y - y.mean()
    num = yc @ Kc @ yc
    return float(num / (np.linalg.norm(Kc) * (yc @ yc)))


def relative_distance_profile(P) -> tuple[np.ndarray, np.ndarray]:
    """Mean of Theta_ij over each relative distance d = i - j.

    P (L1, L2) or (N1, N2, L1, L2) (averaged over pairs first) -> distances (L1 + L2 - 1,)
    from -(L2 - 1) to L1 - 1, values (L1 + L2 - 1,).
    """
    P = _f64(P)
    if P.ndim == 4:
        P = P.mean((0, 1))
    l1, l2 = P.shape
    d = np.arange(l1)[:, None] - np.arange(l2)[None, :]
    distances = np.arange(-(l2 - 1), l1)
    sums = np.bincount((d + l2 - 1).ravel(), weights=P.ravel(), minlength=distances.size)
    counts = np.bincount((d + l2 - 1).ravel(), minlength=distances.size)
    return distances, sums / counts


# --- the metrics the NTK tracker writes -------------------------------------------------------


@dataclass(frozen=True)
class Kernels:
    """The kernels of one tracked row: one parameter group (or the total) at one NTK step.

    K_train (n, n) is the group's Theta(D_short, D_short); K_0 and K_prev the same at step 0
    and at the previous NTK step, `dt` steps before (None: not measured); diag_short (n,) the
    diagonal of the total K_train; y (n,) the kernel-target alignment targets (None: no readout
    vector); ridge the coverage and kernel-regression ridge in units of the mean diagonal of
    the kernel it regularises. Rows of one long probe length add K_cross (m, n) of the group,
    diag_long (m,) (total Theta(x, x) of the long probes) and tail_cos / head_cos (m, n);
    shift rows add K_shift (n, n), the group's K_train with every position offset by L_train.

    The output metrics (`rope_lab.ntk.predictions`, total kernel only) add K_tail (m, n)
    = Theta(F_tail(x_long), F(x_short)), K_cross_0 and K_tail_0 (the same at step 0), the
    outputs F(x_short) `out_short` (n, C) and of the long probes `out_long` (m, 2, C) (rows F
    and F_tail, as the kernel rows), `out_short_0` / `out_long_0` at step 0, and
    `region_sizes` (positions with an output before L_train, and from L_train on).
    """

    K_train: np.ndarray
    diag_short: np.ndarray
    K_0: np.ndarray | None = None
    K_prev: np.ndarray | None = None
    dt: int = 0
    y: np.ndarray | None = None
    ridge: float = 0.0
    K_cross: np.ndarray | None = None
    diag_long: np.ndarray | None = None
    tail_cos: np.ndarray | None = None
    head_cos: np.ndarray | None = None
    K_shift: np.ndarray | None = None
    K_tail: np.ndarray | None = None
    K_cross_0: np.ndarray | None = None
    K_tail_0: np.ndarray | None = None
    out_short: np.ndarray | None = None
    out_short_0: np.ndarray | None = None
    out_long: np.ndarray | None = None
    out_long_0: np.ndarray | None = None
    region_sizes: tuple[int, int] | None = None


Rows = Literal["train", "cross", "shift"]


@dataclass(frozen=True)
class Metric:
    """A tracked NTK metric: `fn(kernels)` gives a row's value, or None for no row.

    `on`: the rows it is written for: "train" (every NTK step, probe_length L_train), "cross"
    (every long probe length) or "shift" (shifted positions, first and last step); `per_group`:
    for every parameter group as well as the total kernel (else the total only). `drift`: a
    "train" metric of how far the kernel moved, a default panel of the `ntk-drift` plot;
    `scaled`: a "cross" metric also measured (total kernel) under each RoPE scaling by the
    scaling stages (`NTKTracker.under_scalings`); `nngp`: also written (total kernel, step 0)
    for the NNGP kernel at initialisation when `ntk.nngp_samples` > 0 (`rope_lab.ntk.nngp`).
    """

    fn: Callable[[Kernels], float | None]
    on: Rows
    per_group: bool
    drift: bool = False
    scaled: bool = False
    nngp: bool = False

    def __post_init__(self) -> None:
        if self.drift and self.on != "train":
            raise ValueError(f"a drift metric is written on train rows, not {self.on!r}")
        if self.drift and self.nngp:
            raise ValueError("a drift metric moves with training; the NNGP is at initialisation")
        if self.scaled and self.on != "cross":
            raise ValueError(f"a metric under RoPE scalings is a cross metric, not {self.on!r}")

    def __call__(self, kernels: Kernels) -> float | None:
        return self.fn(kernels)


def tracked(
    name: str,
    on: Rows,
    per_group: bool = False,
    *,
    drift: bool = False,
    scaled: bool = False,
    nngp: bool = False,
):
    """Decorator registering fn(kernels) -> float | None as the NTK metric `name` (`drift`,
    `scaled`, `nngp`: see `Metric`); the tracker writes the metrics in registration order."""

    def add(fn: Callable[[Kernels], float | None]) -> Callable[[Kernels], float | None]:
        NTK_METRICS.register(name)(Metric(fn, on, per_group, drift, scaled, nngp))
        return fn

    return add


def _given(x: np.ndarray | None) -> np.ndarray:
    if x is None:
        raise ValueError("ntk metric: a kernel it needs is not in this Kernels bundle")
    return x


def _from_init(k: Kernels) -> bool:
    return k.K_0 is not None and bool(np.linalg.norm(k.K_0) > 0)


@tracked("k_train_mean", "train", per_group=True, nngp=True)
def _k_train_mean(k: Kernels) -> float:
    """Off-diagonal mean of K_train."""
    return _offdiag_mean(_f64(k.K_train))


@tracked("k_train_cos_mean", "train", nngp=True)
def _k_train_cos_mean(k: Kernels) -> float:
    """Off-diagonal mean of K_train's cosines K_ij / sqrt(K_ii K_jj)."""
    d = np.diag(k.K_train)
    return _offdiag_mean(cosine(k.K_train, d, d))


@tracked("distance_from_init", "train", per_group=True, drift=True)
def _distance_from_init(k: Kernels) -> float | None:
    """kernel_distance(K_train, K_0); no row where K_0 is unknown or 0."""
    return kernel_distance(k.K_train, k.K_0) if _from_init(k) else None


@tracked("relative_change", "train", per_group=True, drift=True)
def _relative_change(k: Kernels) -> float | None:
    """|K_train - K_0|_F / |K_0|_F; no row where K_0 is unknown or 0."""
    return relative_change(k.K_train, k.K_0) if _from_init(k) else None


@tracked("velocity", "train", drift=True)
def _velocity(k: Kernels) -> float | None:
    """kernel_distance(K_prev, K_train) / dt; no row at the first NTK step."""
    if k.K_prev is None or k.dt <= 0:
        return None
    return kernel_velocity(k.K_prev, k.K_train, k.dt)


def _eig(k: Kernels, rank: int) -> float | None:
    """The rank-th largest eigenvalue of K_train; no row where n < rank."""
    lam = top_eigenvalues(k.K_train, rank)
    return float(lam[rank - 1]) if lam.size >= rank else None


for _rank in range(1, 6):
    tracked(f"eig_{_rank}", "train", nngp=True)(functools.partial(_eig, rank=_rank))


@tracked("effective_rank", "train", nngp=True)
def _effective_rank(k: Kernels) -> float:
    """effective_rank(K_train)."""
    return effective_rank(k.K_train)


@tracked("alignment", "train", nngp=True)
def _alignment(k: Kernels) -> float | None:
    """Centred kernel-target alignment of K_train with y; no row without y or for constant y."""
    if k.y is None or not np.std(k.y) > 0:
        return None
    return kernel_target_alignment(k.K_train, k.y)


@tracked("k_cross_mean", "cross", per_group=True, nngp=True)
def _k_cross_mean(k: Kernels) -> float:
    """Mean of K_cross."""
    return float(np.mean(_given(k.K_cross)))


@tracked("cross_train_ratio", "cross", per_group=True, scaled=True, nngp=True)
def _cross_train_ratio(k: Kernels) -> float:
    """mean(K_cross) / off-diagonal mean(K_train).

    Grows with probe length by construction (gradient norms grow with the number of summed
    positions): compare probe lengths with `cross_train_cos_ratio` or `tail_cos_mean`."""
    return cross_train_ratio(_given(k.K_cross), k.K_train)["offdiag_ratio"]


@tracked("cross_train_cos_ratio", "cross", scaled=True, nngp=True)
def _cross_train_cos_ratio(k: Kernels) -> float:
    """The same ratio for cosines (K_cross by diag_long and diag_short, K_train by its own)."""
    ratio = cross_train_ratio(_given(k.K_cross), k.K_train, _given(k.diag_long), k.diag_short)
    return ratio["cos_offdiag_ratio"]


@tracked("k_cross_cos_mean", "cross", scaled=True, nngp=True)
def _k_cross_cos_mean(k: Kernels) -> float:
    """Mean of K_cross / sqrt(diag_long diag_short^T)."""
    return float(np.mean(cosine(_given(k.K_cross), _given(k.diag_long), k.diag_short)))


@tracked("coverage_mean", "cross", nngp=True)
def _coverage_mean(k: Kernels) -> float:
    """Mean coverage of the long probes by the training span, ridge x mean(diag_short)."""
    lam = k.ridge * float(np.mean(k.diag_short))
    return float(np.mean(coverage(_given(k.K_cross), k.K_train, _given(k.diag_long), lam)))


@tracked("tail_cos_mean", "cross", scaled=True, nngp=True)
def _tail_cos_mean(k: Kernels) -> float:
    """Mean gradient cosine of a long probe's outputs at positions >= L_train."""
    return float(np.mean(_given(k.tail_cos)))


@tracked("head_cos_mean", "cross", nngp=True)
def _head_cos_mean(k: Kernels) -> float:
    """Mean gradient cosine of a long probe's outputs at positions < L_train."""
    return float(np.mean(_given(k.head_cos)))


@tracked("shift_invariance_error", "shift", per_group=True, nngp=True)
def _shift_invariance_error(k: Kernels) -> float | None:
    """|K_shift - K_train|_F / |K_train|_F; no row where K_train is 0."""
    if not np.linalg.norm(k.K_train) > 0:
        return None
    return relative_change(_given(k.K_shift), k.K_train)


# the metrics of the network's outputs (kernel regression, movement from init) register next
from rope_lab.ntk import predictions as _predictions  # noqa: E402, F401

__all__ = [
    "STAT_KEYS",
    "Kernels",
    "Metric",
    "cosine",
    "coverage",
    "cross_train_ratio",
    "effective_rank",
    "eigenvalues",
    "kernel_distance",
    "kernel_stats",
    "kernel_target_alignment",
    "kernel_velocity",
    "relative_change",
    "relative_distance_profile",
    "top_eigenvalues",
    "tracked",
]

"""What the kernel says about the network's outputs at long inputs: kernel regression from the
tracked kernels, and how far the outputs moved from initialisation (NTK metrics registered in
`NTK_METRICS`, imported by `rope_lab.ntk.metrics`; numpy only).

Outputs are the scalars whose gradients make the kernel (`ntk.output`, `rope_lab.ntk.kernels`):
per position f_{i,c}(x) (C = V for "trace", else 1). For a short probe X_j (length L_train) the
output is F(X_j) = sum_i f_i(X_j); a long probe x (length L' > L_train) has two regions, the
in-range positions H = {i < L_train} and the tail T = {i >= L_train}, with region sums
F_H(x) = sum_{i in H} f_i(x), F_T(x) = sum_{i in T} f_i(x) (the kernel's head and tail rows) and
region means f_R(x) = F_R(x) / n_R, n_R the positions of R with an output (n_H = L_train,
n_T = L' - L_train; for "target" the last position has none: n_T = L' - L_train - 1). Signs of
different positions may cancel inside a region mean; this is the output the kernel's rows see.
Subscripts t and 0: at the current NTK step and at step 0 (the tracker's reference step).

Kernel regression (Theta either the kernel at step 0, Theta_0, or at step t, Theta_t):
    alpha = (Theta(X, X) + lam I)^-1 (F_t(X) - F_0(X))            (n, C)
    F_K,R(x) = F_R,0(x) + Theta(F_R(x), X) alpha                  R in {H, T}
with lam = ntk.ridge x mean(diag Theta(X, X)) (relative to the kernel's own scale; default
1e-3, the ridge the coverage metric uses). For C = V ("trace") the tracked kernel is the trace
over outputs, applied to every output c alike. Theta(F_T(x), X) = K_tail and Theta(F_H(x), X)
= K_cross - K_tail. In the kernel regime (the network linear in its parameters, trained on the
short probes' outputs) F_K,R is the network's own output as ridge -> 0 where alpha fits.

Metrics (cross rows, one per long probe length, total kernel only):
- tail_movement = mean_{x,c} |f_T,t - f_T,0| / mean_{x,c} |f_H,t - f_H,0|;
- kernel_prediction_error (Theta_t), kernel_prediction_error_init (Theta_0):
  |F_K,T - F_T,t|_2 / |F_T,t - F_T,0|_2 over (x, c): 0 when the kernel predicts the tail, 1 when
  it predicts no movement (F_K = F_0, e.g. where the cross kernel vanishes);
- kernel_tail_collapse (Theta_t), kernel_tail_collapse_init (Theta_0): the kernel's predicted
  movement, mean |f_K,T - f_T,0| / mean |f_K,H - f_H,0| (tail_movement with f_K for f_t).
Each ratio is undefined where its denominator is 0, as at step 0 (nothing moved: 0 / 0) and no
row is written there; neither without outputs at step 0 (a resumed run whose step-0 kernels file
predates the outputs) nor where the tail is empty.
"""

from __future__ import annotations

import numpy as np

from rope_lab.ntk.metrics import Kernels, tracked


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def kernel_regression(K_train, K_test, delta, ridge: float) -> np.ndarray:
    """K_test (K_train + lam I)^-1 delta with lam = ridge x mean(diag K_train): K_train (n, n),
    K_test (m, n), delta (n, C) -> (m, C). ridge 0: the pseudo-inverse (least-norm fit)."""
    Kt, Kx, d = _f64(K_train), _f64(K_test), _f64(delta)
    lam = ridge * float(np.mean(np.diag(Kt)))
    if lam > 0:
        alpha = np.linalg.solve(Kt + lam * np.eye(len(Kt)), d)
    else:
        alpha = np.linalg.pinv((Kt + Kt.T) / 2, hermitian=True) @ d
    return Kx @ alpha


def movement_ratio(head, tail, sizes: tuple[int, int]) -> float | None:
    """mean |tail / n_T| / mean |head / n_H| for region-sum movements head, tail (m, C) and
    sizes (n_H, n_T); None where the head did not move or the tail is empty."""
    n_head, n_tail = sizes
    den = float(np.mean(np.abs(_f64(head)))) / n_head
    if n_tail <= 0 or not den > 0:
        return None
    return float(np.mean(np.abs(_f64(tail)))) / n_tail / den


def relative_error(predicted, actual) -> float | None:
    """|predicted - actual|_2 / |actual|_2 over all entries; None where actual is 0."""
    p, a = _f64(predicted), _f64(actual)
    den = float(np.linalg.norm(a))
    return float(np.linalg.norm(p - a)) / den if den > 0 else None


def _regions(out_long) -> tuple[np.ndarray, np.ndarray]:
    """(F_H, F_T) (m, C) each from the long outputs (m, 2, C) (rows F, F_tail)."""
    out = _f64(out_long)
    return out[:, 0] - out[:, 1], out[:, 1]


def _has_outputs(k: Kernels) -> bool:
    fields = (k.out_short, k.out_short_0, k.out_long, k.out_long_0, k.region_sizes)
    return all(f is not None for f in fields)


def network_moves(k: Kernels) -> tuple[np.ndarray, np.ndarray]:
    """The network's movement from step 0 (F_H,t - F_H,0, F_T,t - F_T,0), (m, C) each."""
    (head, tail), (head0, tail0) = _regions(k.out_long), _regions(k.out_long_0)
    return head - head0, tail - tail0


def kernel_moves(k: Kernels, init: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """The kernel's predicted movement (F_K,H - F_H,0, F_K,T - F_T,0), (m, C) each, with Theta_0
    (`init`) or Theta_t; None where the kernels it needs are missing."""
    K_train, K_cross, K_tail = (
        (k.K_0, k.K_cross_0, k.K_tail_0) if init else (k.K_train, k.K_cross, k.K_tail)
    )
    if K_train is None or K_cross is None or K_tail is None or not _has_outputs(k):
        return None
    delta = _f64(k.out_short) - _f64(k.out_short_0)
    tail = kernel_regression(K_train, K_tail, delta, k.ridge)
    return kernel_regression(K_train, K_cross, delta, k.ridge) - tail, tail


@tracked("tail_movement", "cross")
def _tail_movement(k: Kernels) -> float | None:
    """mean |f_T,t - f_T,0| / mean |f_H,t - f_H,0| (region means); no row at step 0."""
    if not _has_outputs(k) or k.region_sizes is None:
        return None
    return movement_ratio(*network_moves(k), k.region_sizes)


def _prediction_error(k: Kernels, init: bool) -> float | None:
    moves = kernel_moves(k, init)
    if moves is None or k.region_sizes is None or k.region_sizes[1] <= 0:
        return None
    return relative_error(moves[1], network_moves(k)[1])


def _collapse(k: Kernels, init: bool) -> float | None:
    moves = kernel_moves(k, init)
    if moves is None or k.region_sizes is None:
        return None
    return movement_ratio(*moves, k.region_sizes)


@tracked("kernel_prediction_error", "cross")
def _kernel_prediction_error(k: Kernels) -> float | None:
    """|F_K,T - F_T,t| / |F_T,t - F_T,0| with Theta_t; no row at step 0."""
    return _prediction_error(k, init=False)


@tracked("kernel_prediction_error_init", "cross")
def _kernel_prediction_error_init(k: Kernels) -> float | None:
    """|F_K,T - F_T,t| / |F_T,t - F_T,0| with Theta_0; no row at step 0."""
    return _prediction_error(k, init=True)


@tracked("kernel_tail_collapse", "cross")
def _kernel_tail_collapse(k: Kernels) -> float | None:
    """mean |f_K,T - f_T,0| / mean |f_K,H - f_H,0| with Theta_t; no row at step 0."""
    return _collapse(k, init=False)


@tracked("kernel_tail_collapse_init", "cross")
def _kernel_tail_collapse_init(k: Kernels) -> float | None:
    """mean |f_K,T - f_T,0| / mean |f_K,H - f_H,0| with Theta_0; no row at step 0."""
    return _collapse(k, init=True)


__all__ = ["kernel_moves", "kernel_regression", "movement_ratio", "network_moves", "relative_error"]

"""Known answers of the output metrics (`rope_lab.ntk.predictions`): kernel regression on a model
that is exactly linear in its parameters, and nothing moved after zero training steps.

The tracker's rows of these metrics are recomputed from brute-force Jacobians in
`test_columns.py`; here the laws that pin what they mean.
"""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.ntk import metrics as nm
from rope_lab.ntk import predictions as pr
from rope_lab.registry import NTK_METRICS

L, LONG, N, M, P = 4, 10, 5, 3, 40  # L_train, long length, short / long probes, parameters
OUTPUTS = ("tail_movement", "kernel_prediction_error", "kernel_prediction_error_init",
           "kernel_tail_collapse", "kernel_tail_collapse_init")  # fmt: skip


def linear_model(seed: int = 0):
    """A readout linear in its parameters on fixed features: per-position outputs f_i(x) =
    phi_i(x) . theta, phi (probes, positions, P) drawn once."""
    rng = np.random.default_rng(seed)
    short = rng.normal(size=(N, L, P)).astype(np.float32)
    long = rng.normal(size=(M, LONG, P)).astype(np.float32)
    theta0 = rng.normal(size=P).astype(np.float32) / np.sqrt(P)
    return short, long, theta0


def outputs(phi, theta) -> np.ndarray:
    """f (probes, positions) = phi theta, float64."""
    return np.einsum("nlp,p->nl", np.asarray(phi, np.float64), np.asarray(theta, np.float64))


def kernels_of(short, long, theta0, theta_t, ridge: float) -> nm.Kernels:
    """The Kernels bundle of one cross row, gradients by jax.jacrev of the region sums F (short),
    F and F_tail (long) (a linear model: the same at both steps)."""

    def jac(phi, positions):
        return np.asarray(
            jax.jacrev(lambda th: jnp.einsum("nlp,p->n", phi[:, positions], th))(theta0),
            np.float64,
        )

    g_short, g_long, g_tail = (
        jac(short, slice(None)),
        jac(long, slice(None)),
        jac(long, slice(L, None)),
    )
    K_train, K_cross, K_tail = g_short @ g_short.T, g_long @ g_short.T, g_tail @ g_short.T

    def regions(theta):  # (M, 2, 1): rows F, F_tail
        f = outputs(long, theta)
        return np.stack([f.sum(1), f[:, L:].sum(1)], axis=1)[..., None]

    return nm.Kernels(
        K_train, np.diag(K_train), K_0=K_train, ridge=ridge, K_cross=K_cross, K_tail=K_tail,
        K_cross_0=K_cross, K_tail_0=K_tail, out_short=outputs(short, theta_t).sum(1)[:, None],
        out_short_0=outputs(short, theta0).sum(1)[:, None], out_long=regions(theta_t),
        out_long_0=regions(theta0), region_sizes=(L, LONG - L),
    )  # fmt: skip


def trained(short, theta0, steps: int = 200, lr: float = 2e-3) -> np.ndarray:
    """Gradient descent on sum_j (F(X_j) - y_j)^2 / 2: every update is a combination of the
    training gradients grad F(X_j)."""
    G = np.asarray(short, np.float64).sum(1)  # (N, P): grad F(X_j) of a linear model
    y = np.random.default_rng(1).normal(size=N) * 3
    theta = np.asarray(theta0, np.float64)
    for _ in range(steps):
        theta = theta - lr * G.T @ (G @ theta - y)
    return theta


def test_kernel_regression_interpolates_the_training_outputs_as_ridge_goes_to_zero():
    """f_K(X) = f_0(X) + Theta(X, X)(Theta(X, X) + lam I)^-1 (f_t(X) - f_0(X)) -> f_t(X) as the
    ridge -> 0, for the linear model's kernel (full rank: N < P); the ridge is relative, so a
    kernel scaled by c > 0 predicts the same; an infinite ridge predicts no movement."""
    short, _, theta0 = linear_model()
    theta_t = trained(short, theta0)
    G = short.astype(np.float64).sum(1)
    K = G @ G.T
    delta = (outputs(short, theta_t) - outputs(short, theta0)).sum(1)[:, None]
    np.testing.assert_allclose(pr.kernel_regression(K, K, delta, 0.0), delta, rtol=1e-8)
    errors = [
        np.abs(pr.kernel_regression(K, K, delta, r) - delta).max() for r in (1e-2, 1e-4, 1e-6)
    ]
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-5 * np.abs(delta).max()
    np.testing.assert_allclose(
        pr.kernel_regression(7.0 * K, 7.0 * K, delta, 1e-3), pr.kernel_regression(K, K, delta, 1e-3)
    )
    assert np.abs(pr.kernel_regression(K, K, delta, 1e12)).max() < 1e-9 * np.abs(delta).max()


def test_a_linear_model_trained_on_the_probes_is_its_own_kernel_prediction():
    """Trained by gradient descent on the short probes, theta_t - theta_0 lies in the span of
    their gradients, so kernel regression (ridge -> 0) reproduces f_t at every long position:
    both prediction errors are ~0 and the kernel's tail collapse is the network's tail
    movement. Moved off that span, the error is not 0."""
    short, long, theta0 = linear_model()
    theta_t = trained(short, theta0)
    k = kernels_of(short, long, theta0, theta_t, ridge=1e-10)
    metrics = {name: NTK_METRICS[name](k) for name in OUTPUTS}
    assert metrics["kernel_prediction_error"] < 1e-4
    assert metrics["kernel_prediction_error_init"] < 1e-4
    assert metrics["kernel_tail_collapse"] == pytest.approx(metrics["tail_movement"], rel=1e-4)
    f_t, f_0 = outputs(long, theta_t), outputs(long, theta0)
    by_hand = np.mean(np.abs(f_t[:, L:].sum(1) - f_0[:, L:].sum(1))) / (LONG - L)
    by_hand /= np.mean(np.abs(f_t[:, :L].sum(1) - f_0[:, :L].sum(1))) / L
    assert metrics["tail_movement"] == pytest.approx(by_hand, rel=1e-12)
    off_span = theta_t + np.random.default_rng(2).normal(size=P) / np.sqrt(P)
    assert (
        NTK_METRICS["kernel_prediction_error"](kernels_of(short, long, theta0, off_span, 1e-10))
        > 0.1
    )


def test_after_zero_training_steps_nothing_moved_and_no_row_is_written():
    """f_t = f_0: the tail movement's numerator is 0 and its denominator too, the kernel
    predicts no movement, and every output metric is undefined (0 / 0): None, no row."""
    short, long, theta0 = linear_model()
    k = kernels_of(short, long, theta0, theta0, ridge=1e-3)
    head, tail = pr.network_moves(k)
    assert np.all(tail == 0) and np.all(head == 0)
    moves = pr.kernel_moves(k, init=False)
    assert moves is not None and all(np.all(m == 0) for m in moves)
    assert {name: NTK_METRICS[name](k) for name in OUTPUTS} == dict.fromkeys(OUTPUTS)


def test_output_metrics_without_step_zero_outputs_or_tail_write_no_row():
    """No row without the outputs at step 0 (a run resumed from a kernels file written before
    they were kept), without the step-0 kernels (init metrics only), or with an empty tail;
    a kernel that does not reach the tail predicts no tail movement: error 1, collapse 0."""
    short, long, theta0 = linear_model()
    k = kernels_of(short, long, theta0, trained(short, theta0), ridge=1e-3)
    assert all(NTK_METRICS[name](replace(k, out_long_0=None)) is None for name in OUTPUTS)
    assert NTK_METRICS["kernel_prediction_error_init"](replace(k, K_tail_0=None)) is None
    assert NTK_METRICS["kernel_prediction_error"](replace(k, K_tail_0=None)) is not None
    assert all(NTK_METRICS[n](replace(k, region_sizes=(L, 0))) is None for n in OUTPUTS)
    blind = replace(k, K_tail=np.zeros_like(k.K_tail), K_tail_0=np.zeros_like(k.K_tail))
    assert NTK_METRICS["kernel_prediction_error"](blind) == pytest.approx(1.0)
    assert NTK_METRICS["kernel_tail_collapse_init"](blind) == 0.0


def test_movement_ratio_divides_region_means():
    """mean |tail| / n_T over mean |head| / n_H: region sums of equal per-position movement
    give 1 whatever the region sizes."""
    head, tail = np.full((2, 1), 3.0), np.full((2, 1), -7.0)  # 1 per position in each region
    assert pr.movement_ratio(head, tail, (3, 7)) == pytest.approx(1.0)
    assert pr.movement_ratio(head, 2 * tail, (3, 7)) == pytest.approx(2.0)
    assert pr.movement_ratio(0 * head, tail, (3, 7)) is None
    assert pr.relative_error(np.ones(3), np.zeros(3)) is None
    assert pr.relative_error(np.array([1.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx(1.0)

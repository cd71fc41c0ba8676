"""Laws of the kernel metrics, on random PSD matrices and feature maps."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.ntk import metrics as nm
from rope_lab.registry import NTK_METRICS

seeds = st.integers(0, 2**31 - 1)


def features(seed: int, n: int, p: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, p))


def psd(seed: int, n: int, p: int | None = None) -> np.ndarray:
    phi = features(seed, n, p or n + 2)
    return phi @ phi.T


@given(seed=seeds, n=st.integers(1, 8), c=st.floats(1e-3, 1e3))
def test_kernel_distance_scale_invariant_and_bounded(seed, n, c):
    K = psd(seed, n)
    assert nm.kernel_distance(K, c * K) == pytest.approx(0.0, abs=1e-12)
    other = np.random.default_rng(seed + 1).normal(size=(n, n))
    assert 0.0 <= nm.kernel_distance(K, other) <= 2.0
    assert nm.kernel_distance(K, -K) == pytest.approx(2.0)
    assert nm.kernel_velocity(K, other, 0.5) == pytest.approx(2 * nm.kernel_distance(K, other))


@given(seed=seeds, n=st.integers(1, 8))
def test_relative_change(seed, n):
    K = psd(seed, n)
    assert nm.relative_change(K, K) == 0.0
    assert nm.relative_change(2 * K, K) == pytest.approx(1.0)


@given(n=st.integers(1, 12))
def test_effective_rank_of_identity_and_rank_one(n):
    assert nm.effective_rank(np.eye(n)) == pytest.approx(n)
    v = np.arange(1.0, n + 1)
    assert nm.effective_rank(np.outer(v, v)) == pytest.approx(1.0)
    assert nm.effective_rank(np.zeros((n, n))) == 0.0


@given(seed=seeds, n=st.integers(1, 8), k=st.integers(1, 10))
def test_top_eigenvalues(seed, n, k):
    K = psd(seed, n)
    top = nm.top_eigenvalues(K, k)
    assert top.shape == (min(k, n),)
    assert np.all(np.diff(top) <= 1e-12)
    np.testing.assert_allclose(top[0], np.linalg.eigvalsh(K).max())
    assert nm.eigenvalues(K).sum() == pytest.approx(np.trace(K))


@given(seed=seeds, n=st.integers(2, 10))
def test_alignment_of_y_yT_with_y_is_one(seed, n):
    y = np.random.default_rng(seed).normal(size=n)
    assert nm.kernel_target_alignment(np.outer(y, y), y) == pytest.approx(1.0)
    assert nm.kernel_target_alignment(np.outer(y, y) + 5.0, y) == pytest.approx(1.0)  # centred
    K = psd(seed, n)
    assert -1.0 - 1e-9 <= nm.kernel_target_alignment(K, y) <= 1.0 + 1e-9


@given(seed=seeds, n=st.integers(1, 6), extra=st.integers(1, 6), m=st.integers(1, 4))
def test_coverage_span_orthogonal_and_bounded(seed, n, extra, m):
    """Features phi (n, p), p > n: a probe in the span is covered ~1, an orthogonal one ~0."""
    rng = np.random.default_rng(seed)
    phi = features(seed, n, n + extra)
    K_train = phi @ phi.T
    inside = rng.normal(size=(m, n)) @ phi
    q, _ = np.linalg.qr(np.concatenate([phi.T, rng.normal(size=(n + extra, extra))], axis=1))
    outside = rng.normal(size=(m, extra)) @ q[:, n:].T  # orthogonal to the span of phi
    anywhere = rng.normal(size=(m, n + extra))
    diag = lambda x: np.sum(x * x, axis=1)
    lam = 1e-9 * np.trace(K_train) / n
    np.testing.assert_allclose(nm.coverage(inside @ phi.T, K_train, diag(inside), lam), 1, 1e-4)
    np.testing.assert_allclose(
        nm.coverage(outside @ phi.T, K_train, diag(outside), lam), 0, atol=1e-8
    )
    cov = nm.coverage(anywhere @ phi.T, K_train, diag(anywhere), 1e-3)
    assert cov.shape == (m,) and np.all(cov >= 0) and np.all(cov <= 1 + 1e-9)
    single = nm.coverage(anywhere[0] @ phi.T, K_train, diag(anywhere)[0], 1e-3)
    assert isinstance(single, float) and single == pytest.approx(cov[0])
    pinv = nm.coverage(inside @ phi.T, K_train, diag(inside), 0.0)  # lam = 0: pseudo-inverse
    np.testing.assert_allclose(pinv, 1, 1e-6)


@given(seed=seeds, n=st.integers(2, 6), m=st.integers(1, 5))
def test_kernel_stats_and_cosines(seed, n, m):
    phi_short, phi_long = features(seed, n, 9), features(seed + 1, m, 9)
    K_train, K_cross = phi_short @ phi_short.T, phi_long @ phi_short.T
    diag_long, diag_short = np.sum(phi_long**2, 1), np.sum(phi_short**2, 1)
    s = nm.kernel_stats(K_train)
    assert tuple(s) == nm.STAT_KEYS
    assert s["mean"] == pytest.approx(K_train.mean()) and s["var"] == pytest.approx(K_train.var())
    off = K_train[~np.eye(n, dtype=bool)]
    assert s["offdiag_mean"] == pytest.approx(off.mean())
    C = nm.cosine(K_train, diag_short, diag_short)
    np.testing.assert_allclose(np.diag(C), 1.0)
    assert s["cos_mean"] == pytest.approx(C.mean())
    c = nm.kernel_stats(K_cross, diag_long, diag_short)
    assert math.isnan(c["offdiag_mean"])
    assert np.all(np.abs(nm.cosine(K_cross, diag_long, diag_short)) <= 1 + 1e-12)
    assert math.isnan(nm.kernel_stats(K_cross)["cos_mean"]) or m == n
    r = nm.cross_train_ratio(K_train, K_train, diag_short)
    assert r["mean_ratio"] == pytest.approx(1.0) and r["cos_mean_ratio"] == pytest.approx(1.0)
    r = nm.cross_train_ratio(K_cross, K_train, diag_long, diag_short)
    assert r["mean_ratio"] == pytest.approx(K_cross.mean() / K_train.mean())
    assert math.isnan(nm.cross_train_ratio(K_cross, K_train)["cos_mean_ratio"])


@given(l1=st.integers(1, 7), l2=st.integers(1, 7), n=st.integers(1, 3))
def test_relative_distance_profile_recovers_a_toeplitz_kernel(l1, l2, n):
    d = np.arange(l1)[:, None] - np.arange(l2)[None, :]
    g = lambda x: np.cos(0.7 * x) + 0.1 * x
    distances, values = nm.relative_distance_profile(np.broadcast_to(g(d), (n, 2, l1, l2)))
    np.testing.assert_array_equal(distances, np.arange(-(l2 - 1), l1))
    np.testing.assert_allclose(values, g(distances), atol=1e-12)
    P = np.random.default_rng(0).normal(size=(l1, l2))
    _, values = nm.relative_distance_profile(P)
    np.testing.assert_allclose(values[l2 - 1], np.mean(np.diag(P)))


def test_cosine_edge_cases_have_exact_values():
    """Small norms are still normalised; a zero (or round-off negative) diagonal entry gives a
    cosine of exactly 0, never NaN; float32 inputs are computed in float64."""
    K = np.array([[0.25, 0.1], [0.1, 0.25]])
    np.testing.assert_array_equal(nm.cosine(K, np.diag(K), np.diag(K)), [[1.0, 0.4], [0.4, 1.0]])
    K = np.array([[0.0, 0.0], [0.0, 4.0]])
    np.testing.assert_array_equal(nm.cosine(K, [0.0, 4.0], [0.0, 4.0]), [[0.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(nm.cosine(K, [-1e-12, 4.0], [-1e-12, 4.0]), [[0, 0], [0, 1]])
    K32 = np.array([[3.0, 1e-4], [1e-4, 3.0]], np.float32)
    expected = np.float64(np.float32(1e-4)) / 3.0
    assert nm.cosine(K32, np.diag(K32), np.diag(K32))[0, 1] == expected


def test_offdiag_mean_of_a_single_probe_is_undefined():
    assert math.isnan(nm.kernel_stats(np.array([[2.0]]))["offdiag_mean"])
    stats = nm.kernel_stats(np.array([[1.0, 2.0], [2.0, 5.0]]))
    assert stats["offdiag_mean"] == 2.0 and stats["mean"] == 2.5


def test_effective_rank_ignores_round_off_negative_eigenvalues():
    K = np.diag([1.0, 1.0, -1e-9])
    assert nm.effective_rank(K) == pytest.approx(2.0, rel=1e-12)


def test_tracked_metrics_write_no_row_where_undefined():
    """A tracked metric gives None (no row) without K_0 or with K_0 = 0, at the first NTK step,
    for an eigenvalue rank above n, without or with constant alignment targets, and for the
    shift error of a zero kernel; a cross metric needs K_cross."""
    metrics = dict(NTK_METRICS.items())
    assert {m.on for m in metrics.values()} == {"train", "cross", "shift"}
    K = psd(0, 3)
    base = nm.Kernels(K, np.diag(K))
    assert metrics["k_train_mean"](base) == pytest.approx(K[~np.eye(3, dtype=bool)].mean())
    for name in ("distance_from_init", "relative_change"):
        assert metrics[name](base) is None
        assert metrics[name](replace(base, K_0=np.zeros_like(K))) is None
        assert metrics[name](replace(base, K_0=K)) == pytest.approx(0.0, abs=1e-12)
    assert metrics["velocity"](replace(base, K_prev=K, dt=0)) is None
    assert metrics["velocity"](replace(base, K_prev=2 * K, dt=3)) == pytest.approx(0, abs=1e-12)
    assert metrics["eig_3"](base) is not None and metrics["eig_4"](base) is None
    assert metrics["alignment"](base) is None
    assert metrics["alignment"](replace(base, y=np.ones(3))) is None
    zero = nm.Kernels(np.zeros((3, 3)), np.zeros(3), K_shift=K)
    assert metrics["shift_invariance_error"](zero) is None
    with pytest.raises(ValueError, match="not in this Kernels"):
        metrics["k_cross_mean"](base)


def test_drift_and_scaled_metrics_are_declared_by_the_metrics():
    """The ntk-drift plot's default panels and the rows under RoPE scalings are the metrics
    that declare `drift` and `scaled`: these train and cross metrics."""
    drift = {name for name, m in NTK_METRICS.items() if m.drift}
    scaled = {name for name, m in NTK_METRICS.items() if m.scaled}
    assert drift == {"distance_from_init", "velocity", "relative_change"}
    assert scaled == {"k_cross_cos_mean", "cross_train_cos_ratio", "cross_train_ratio",
                      "tail_cos_mean"}  # fmt: skip
    assert {NTK_METRICS[n].on for n in drift} == {"train"}
    assert {NTK_METRICS[n].on for n in scaled} == {"cross"}


def test_nngp_metrics_are_those_that_make_sense_at_initialisation():
    """The NNGP's rows are the metrics declaring `nngp`: every kernel statistic of one kernel
    (train, cross, tail cosines, shift), none that compares with another step (drift), none of
    the network's movement from initialisation; no metric is both drift and nngp."""
    nngp = {name for name, m in NTK_METRICS.items() if m.nngp}
    assert nngp == {
        "k_train_mean", "k_train_cos_mean", *(f"eig_{k}" for k in range(1, 6)),
        "effective_rank", "alignment", "k_cross_mean", "cross_train_ratio",
        "cross_train_cos_ratio", "k_cross_cos_mean", "coverage_mean", "tail_cos_mean",
        "head_cos_mean", "shift_invariance_error",
    }  # fmt: skip
    outputs = {"tail_movement", "kernel_prediction_error", "kernel_prediction_error_init",
               "kernel_tail_collapse", "kernel_tail_collapse_init"}  # fmt: skip
    assert outputs <= set(NTK_METRICS.names())
    for name in outputs:
        m = NTK_METRICS[name]
        assert (m.on, m.per_group, m.drift, m.scaled, m.nngp) == (
            "cross",
            False,
            False,
            False,
            False,
        )
    with pytest.raises(ValueError, match="NNGP"):
        nm.Metric(lambda k: 1.0, "train", False, drift=True, nngp=True)

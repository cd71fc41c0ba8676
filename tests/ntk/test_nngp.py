"""The empirical NNGP (`rope_lab.ntk.nngp`): its keys and its convergence in K.

That the tracker's NNGP rows are the sample mean of f(x) f(x')^T over K initialisations built
one by one in a Python loop is checked, metric by metric, in `test_columns.py`.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rope_lab.config import replace
from rope_lab.ntk.nngp import nngp_kernels, nngp_keys, probe_outputs
from rope_lab.ntk.probes import draw_probes, readout
from rope_lab.trial.train import make_task_from
from tests.helpers import tiny_trial


def test_keys_come_from_the_trial_seed_and_a_larger_k_extends_a_smaller_one():
    cfg = tiny_trial()
    keys = np.asarray(nngp_keys(cfg, 8))
    assert len({tuple(k) for k in keys}) == 8
    np.testing.assert_array_equal(np.asarray(nngp_keys(cfg, 3)), keys[:3])
    other = np.asarray(nngp_keys(replace(cfg, **{"train.seed": 1}), 3))
    assert not np.array_equal(other, keys[:3])
    init = np.asarray(jax.random.fold_in(jax.random.PRNGKey(cfg.train.seed), 0))
    assert not any(np.array_equal(k, init) for k in keys)  # not the trial's own initialisation


@pytest.mark.slow  # three compiled programs (one per K): ~30 s on 2 cores
def test_the_sample_kernel_converges_as_k_grows():
    """Relative Frobenius distance of the K-sample NNGP (K_train and K_cross) from a reference
    of 256 independent initialisations falls from K = 4 to K = 64 (the sampling error goes
    like 1 / sqrt(K), on top of the reference's own)."""
    cfg = replace(
        tiny_trial(width=16, length=8),
        **{"ntk.probes": 4, "ntk.probe_multipliers": (2.0,), "ntk.chunk_size": 4},
    )
    probes, output = draw_probes(cfg, make_task_from(cfg)), readout(cfg)

    def kernels(keys):
        k = nngp_kernels(probe_outputs(cfg, probes, output, keys), probes.long)
        return np.concatenate([k["train/total"].ravel(), k["cross16/total"].ravel()])

    reference = kernels(jax.random.split(jax.random.PRNGKey(12345), 256))
    err = {
        K: np.linalg.norm(kernels(nngp_keys(cfg, K)) - reference) / np.linalg.norm(reference)
        for K in (4, 64)
    }
    # measured: 0.73 at K = 4, 0.35 at K = 64 (the reference's own error is ~0.2)
    assert err[64] < 0.6 * err[4], err
    assert err[64] < 0.45, err

"""The `cos_sin` table against a NumPy float64 recomputation."""

from __future__ import annotations

import math

import numpy as np

from tests.reference_vectors.conftest import read_table


def test_cos_sin_equal_a_numpy_float64_recomputation(written):
    table = read_table(written, "cos_sin")
    inv = read_table(written, "inv_freq").rename({"inv_freq": "f"})
    t = table.join(inv, on=["case_id", "index"], how="left")
    assert t["f"].null_count() == 0
    pos = t["position"].to_numpy().astype(np.float64)
    f = t["f"].to_numpy().astype(np.float64)
    exact = pos * f  # exact in float64: 24-bit x 24-bit mantissas
    np.testing.assert_array_equal(t["angle_exact"].to_numpy(), exact)
    angle = t["angle"].to_numpy()
    # a float32 multiply of float32(position): exact in float64, then rounded once
    pos32 = pos.astype(np.float32).astype(np.float64)  # positions above 2^24 round first
    assert (pos32 != pos).any()  # s x L - 1 = 79999999 of the huge-length YaRN case
    np.testing.assert_array_equal(angle, (pos32 * f).astype(np.float32))
    bound = np.spacing(np.abs(angle)) / 2 + np.abs(pos32 - pos) * f
    assert np.all(np.abs(angle - exact) <= bound)
    for fn, col in ((np.cos, "cos"), (np.sin, "sin")):
        np.testing.assert_allclose(t[f"{col}_exact"].to_numpy(), fn(exact), rtol=0, atol=1e-15)
        got = t[col].to_numpy().astype(np.float64)
        want = fn(angle.astype(np.float64))
        assert np.all(np.abs(got - want) <= np.spacing(np.float32(1)) / 2 * np.maximum(
            np.abs(want), 2**-126))  # fmt: skip
        # float32's angle costs at most its distance from the exact product
        gap = np.abs(got - fn(exact))
        assert np.all(gap <= np.abs(angle - exact) + 2**-24), col
    # positions: the fixed set plus each case's L - 1, L and s x L - 1
    first = table.filter(case_id="yarn-000")  # d 64, theta 1e4, factor 4, L 2048
    assert sorted(set(first["position"])) == [0, 1, 100, 2047, 2048, 4095, 4096, 8191, 32767,
                                              131071]  # fmt: skip
    # pinned: frequency 0 of direct RoPE is 1, so the angle is the position itself
    row = table.filter(case_id="default-000", position=131071, index=0).row(0, named=True)
    assert row["angle"] == 131071.0 and row["cos"] == np.float32(math.cos(131071.0))
    # frequency 1 (10000 ** -(1/32)) at 131071: the float32 product is off the exact one
    row = table.filter(case_id="default-000", position=131071, index=1).row(0, named=True)
    assert row["angle"] != row["angle_exact"]
    assert abs(row["angle"] - row["angle_exact"]) <= 2**-7 / 2

"""Tests for the `proportional` RoPE scaling (HF's `_compute_proportional_rope_parameters`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.model import rope, rotation

GOLDEN = Path(__file__).parents[2] / "fixtures" / "hf_rope_golden.json"
# float32 exponent 2i/d (relative error up to ln(theta) * 2**-24 < 1e-6 for theta <= 1e6) and
# a float32 result, against a float64 transcription.
RTOL = 2e-6


def ref_proportional(theta: float, factor: float, p: float, d: int) -> np.ndarray:
    """(d/2,) float64: theta ** (-2i/d) / factor for the first floor(p * d / 2), 0 after."""
    rotated = math.floor(p * d / 2)
    return np.array(
        [theta ** (-2.0 * i / d) / factor if i < rotated else 0.0 for i in range(d // 2)]
    )


@given(
    theta=st.floats(2.0, 1e6),
    factor=st.floats(1.0, 64.0),
    p=st.floats(0.0, 1.0, exclude_min=True),
    d=st.integers(1, 128).map(lambda h: 2 * h),
)
@settings(max_examples=60, deadline=None)
def test_closed_form(theta: float, factor: float, p: float, d: int) -> None:
    inv, att = rope.inv_freq("proportional", d, theta=theta, factor=factor, partial_rotary_factor=p)
    assert inv.dtype == np.float32 and inv.shape == (d // 2,) and att == 1.0
    expected = ref_proportional(theta, factor, p, d)
    np.testing.assert_array_equal(inv[expected == 0], 0.0)
    np.testing.assert_allclose(inv.astype(np.float64), expected, rtol=RTOL, atol=0)


@pytest.mark.parametrize(
    "d,p,rotated",
    [(64, 0.25, 8), (96, 0.3, 14), (4, 0.5, 1), (16, 0.1, 0), (100, 0.58, 28), (32, 1.0, 16)],
)
def test_zeros_beyond_the_rotated_count(d: int, p: float, rotated: int) -> None:
    """Rounded as HF (0.58 * 100 is just below 58 in float64); rotated ones equal linear's."""
    inv, _ = rope.inv_freq("proportional", d, factor=3.0, partial_rotary_factor=p)
    lin, _ = rope.inv_freq("linear", d, factor=3.0)
    assert np.count_nonzero(inv) == rotated
    np.testing.assert_array_equal(inv[rotated:], 0.0)
    np.testing.assert_array_equal(inv[:rotated], lin[:rotated])


def test_unrotated_pairs_pass_through_apply() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(5, 2, 16)), dtype=jnp.float32)
    inv, att = rope.inv_freq("proportional", 16, partial_rotary_factor=0.5)
    out = np.asarray(rotation.apply_rotary(x, jnp.arange(5) * 9 + 3, inv, att))
    kept = np.r_[4:8, 12:16]  # pairs (j, j + 8) with j >= 4 have frequency 0
    np.testing.assert_allclose(out[..., kept], np.asarray(x)[..., kept], rtol=0, atol=0)
    assert not np.allclose(out[..., :4], np.asarray(x)[..., :4])


def test_defaults_and_none_mean_full_rotation() -> None:
    full, _ = rope.inv_freq("proportional", 32, factor=2.0)
    unset, _ = rope.inv_freq("proportional", 32, factor=2.0, partial_rotary_factor=None)
    lin, _ = rope.inv_freq("linear", 32, factor=2.0)
    np.testing.assert_array_equal(full, lin)
    np.testing.assert_array_equal(unset, lin)


@pytest.mark.parametrize("p", [0, 0.0, -0.25, 1.5, float("nan"), float("inf"), "0.5", True])
def test_invalid_partial_rotary_factor(p: object) -> None:
    for func in (rope.inv_freq, rope.validate_scaling):
        with pytest.raises(ValueError, match=r"partial_rotary_factor must be .*\(0, 1\], got "):
            func("proportional", 16, partial_rotary_factor=p)


def test_unknown_parameter_lists_partial_rotary_factor() -> None:
    msg = r"unknown parameter 'partial' \(value 0\.5\) for kind 'proportional'; allowed: partial_"
    with pytest.raises(ValueError, match=msg):
        rope.inv_freq("proportional", 16, partial=0.5)


def test_golden_has_proportional_cases() -> None:
    """The HF cases themselves are checked by tests/model/test_rope.py::test_matches_hf_golden."""
    cases = json.loads(GOLDEN.read_text())["cases"]
    mine = [c for c in cases if c["kind"] == "proportional"]
    assert len(mine) >= 8
    assert len({c["params"].get("partial_rotary_factor") for c in mine}) >= 5
    assert any(0 in c["inv_freq"] for c in mine) and any(c["factor"] > 1 for c in mine)

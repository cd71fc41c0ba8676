"""Tests for rope_lab.model.rope: frequencies vs closed forms and HF golden values, rotation,
errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.model import rope, rotation
from rope_lab.registry import SCALINGS
from tests.model.scalings.test_registry import EXAMPLE_PARAMS

GOLDEN = Path(__file__).parents[1] / "fixtures" / "hf_rope_golden.json"
# float32 outputs vs float64 closed forms: HF rounds 2i/d to float32 (relative error up to
# ln(theta') * 2**-24 < 1e-6 for the thetas here) and the result itself is float32.
RTOL_CLOSED = 2e-6
SETTINGS = settings(max_examples=40, deadline=None)


# ----------------------------------------------------------------------------- closed forms


def ref_default(theta: float, d: int) -> np.ndarray:
    """theta ** (-2i / d), i = 0 .. d/2 - 1, float64."""
    return np.array([theta ** (-2.0 * i / d) for i in range(d // 2)])


def ref_yarn_bounds(
    d: int, theta: float, length: int, beta_fast: float, beta_slow: float, truncate: bool
) -> tuple[float, float]:
    # dimension index at which the wavelength 2 pi theta^(2i/d) fits `beta` times into `length`
    def where(beta: float) -> float:
        return d / 2 * math.log(length / (2 * math.pi * beta)) / math.log(theta)

    low, high = where(beta_fast), where(beta_slow)
    if truncate:
        low, high = float(math.floor(low)), float(math.ceil(high))
    return max(low, 0.0), min(high, d - 1.0)


def ref_yarn(
    d: int,
    theta: float,
    factor: float,
    length: int,
    beta_fast: float = 32,
    beta_slow: float = 1,
    truncate: bool = True,
) -> np.ndarray:
    low, high = ref_yarn_bounds(d, theta, length, beta_fast, beta_slow, truncate)
    width = high - low if high != low else 0.001
    out = []
    for i, f in enumerate(ref_default(theta, d)):
        t = min(max((i - low) / width, 0.0), 1.0)  # 0: keep (extrapolate), 1: divide by factor
        out.append((1 - t) * f + t * f / factor)
    return np.array(out)


def ref_llama3(d: int, theta: float, factor: float, length: int, lo: float, hi: float):
    out = []
    for f in ref_default(theta, d):
        wavelength = 2 * math.pi / f
        if wavelength < length / hi:
            out.append(f)
        elif wavelength > length / lo:
            out.append(f / factor)
        else:
            s = (length / wavelength - lo) / (hi - lo)
            out.append(s * f + (1 - s) * f / factor)
    return np.array(out)


def ref_ntk(d: int, theta: float, scale: float) -> np.ndarray:
    return ref_default(theta * scale ** (d / (d - 2)), d)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL_CLOSED) -> None:
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=0)


# ----------------------------------------------------------------------------- frequencies


@pytest.mark.parametrize("d,theta", [(2, 10000.0), (16, 10000.0), (64, 500000.0), (128, 1e6)])
def test_default_and_linear(d: int, theta: float) -> None:
    inv, att = rope.inv_freq("default", d, theta=theta)
    assert inv.shape == (d // 2,) and att == 1.0
    assert_close(inv, ref_default(theta, d))
    lin, att = rope.inv_freq("linear", d, theta=theta, factor=4.5)
    assert_close(lin, ref_default(theta, d) / 4.5)
    assert att == 1.0


def test_default_ignores_factor_and_lengths() -> None:
    base, _ = rope.inv_freq("default", 32)
    other, _ = rope.inv_freq("default", 32, factor=8.0, original_length=64, seq_len=1000)
    np.testing.assert_array_equal(base, other)


@pytest.mark.parametrize("d,factor", [(4, 2.0), (32, 4.0), (128, 16.0)])
def test_ntk_exponent_uses_rotary_dim(d: int, factor: float) -> None:
    inv, att = rope.inv_freq("ntk", d, factor=factor)
    assert att == 1.0
    assert_close(inv, ref_ntk(d, 10000.0, factor))
    # partial rotary: the exponent is d / (d - 2) of the rotated dims, not of a larger head
    wrong = ref_default(10000.0 * factor ** (2 * d / (2 * d - 2)), d)
    assert not np.allclose(inv, wrong, rtol=1e-4)


@given(
    d=st.sampled_from([4, 16, 64]),
    factor=st.floats(1.0, 16.0),
    length=st.integers(1, 5000),
    frac=st.floats(0.0, 1.0),
)
@SETTINGS
def test_dynamic_is_default_up_to_training_length(d, factor, length, frac) -> None:
    seq_len = max(1, int(frac * length))
    default, _ = rope.inv_freq("default", d)
    dyn, att = rope.inv_freq("dynamic", d, factor=factor, original_length=length, seq_len=seq_len)
    np.testing.assert_array_equal(dyn, default)
    assert att == 1.0
    none, _ = rope.inv_freq("dynamic", d, factor=factor, original_length=length)
    np.testing.assert_array_equal(none, default)


@given(
    d=st.sampled_from([4, 16, 64]),
    factor=st.floats(1.0, 16.0),
    length=st.integers(1, 5000),
    extra=st.integers(1, 50000),
)
@SETTINGS
def test_dynamic_closed_form_above_training_length(d, factor, length, extra) -> None:
    seq_len = length + extra
    dyn, att = rope.inv_freq("dynamic", d, factor=factor, original_length=length, seq_len=seq_len)
    scale = factor * seq_len / length - (factor - 1)
    assert_close(dyn, ref_ntk(d, 10000.0, scale))
    assert att == 1.0


def test_dynamic_just_above_length_differs() -> None:
    default, _ = rope.inv_freq("default", 64)
    dyn, _ = rope.inv_freq("dynamic", 64, factor=4.0, original_length=512, seq_len=513)
    assert np.all(dyn[1:] < default[1:]) and dyn[0] == default[0]


@pytest.mark.parametrize(
    "d,theta,length,truncate,expected",
    [
        # 64 * ln(2048 / (2 pi 32)) / (2 ln 1e4) = 8.064, and with beta 1: 20.105
        (64, 10000.0, 2048, True, (8, 21)),
        (64, 10000.0, 2048, False, (8.064000845, 20.105200672)),
        (64, 10000.0, 64, True, (0, 9)),  # low below 0 -> 0
        (32, 10000.0, 1, True, (0, -3)),  # high is clamped from above only
        (32, 100.0, 10_000_000, True, (37, 31)),  # low is clamped from below only
    ],
)
def test_yarn_correction_range(d, theta, length, truncate, expected) -> None:
    got = rope.yarn_correction_range(d, theta, length, 32, 1, truncate)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    np.testing.assert_allclose(got, ref_yarn_bounds(d, theta, length, 32, 1, truncate), rtol=1e-12)


@pytest.mark.parametrize(
    "d,theta,factor,length,params",
    [
        (64, 10000.0, 4.0, 2048, {}),
        (64, 10000.0, 4.0, 2048, {"truncate": False}),
        (128, 1e6, 16.0, 4096, {}),
        (128, 1e6, 16.0, 4096, {"truncate": False}),
        (64, 10000.0, 40.0, 4096, {"beta_fast": 16, "beta_slow": 2}),
        (16, 10000.0, 2.0, 256, {"truncate": True}),
        (32, 10000.0, 8.0, 1, {}),
        (32, 100.0, 8.0, 10_000_000, {}),
    ],
)
def test_yarn_closed_form(d, theta, factor, length, params) -> None:
    inv, _ = rope.inv_freq("yarn", d, theta=theta, factor=factor, original_length=length, **params)
    # float32 ramp: its rounding (~6e-8) is amplified by (factor - 1) in the blend
    assert_close(inv, ref_yarn(d, theta, factor, length, **params), rtol=max(2e-6, factor * 1e-7))


def test_yarn_regions_and_truncate() -> None:
    d, factor = 64, 4.0
    base = ref_default(10000.0, d)
    inv, _ = rope.inv_freq("yarn", d, factor=factor, original_length=2048)
    # ramp over dims (8, 21): pure extrapolation up to 8, pure interpolation from 21
    assert_close(inv[:9], base[:9])
    assert_close(inv[21:], base[21:] / factor)
    assert np.all((inv[9:21] < base[9:21]) & (inv[9:21] > base[9:21] / factor))
    untruncated, _ = rope.inv_freq("yarn", d, factor=factor, original_length=2048, truncate=False)
    assert not np.allclose(inv, untruncated, rtol=1e-3)
    assert_close(untruncated[:9], base[:9])  # 8.06 > 8: index 8 still extrapolated
    assert untruncated[20] < base[20] / factor * 1.05  # 20.1: index 20 mostly interpolated
    assert_close(untruncated[21:], base[21:] / factor)


def test_yarn_extreme_bounds() -> None:
    base = ref_default(10000.0, 32)
    # high < low = 0: ramp is 0 everywhere -> plain extrapolation
    inv, _ = rope.inv_freq("yarn", 32, factor=8.0, original_length=1)
    assert_close(inv, base)
    # low (37) > high (31): reversed ramp is 1 for every index -> plain interpolation
    inv, _ = rope.inv_freq("yarn", 32, theta=100.0, factor=8.0, original_length=10_000_000)
    assert_close(inv, ref_default(100.0, 32) / 8.0)


def test_yarn_zero_width_ramp_guard() -> None:
    # beta_fast == beta_slow without truncation: low == high == 12.88 -> step at 12.88 (+0.001)
    inv, _ = rope.inv_freq(
        "yarn", 64, factor=8.0, original_length=1024, beta_fast=4, beta_slow=4, truncate=False
    )
    base = ref_default(10000.0, 64)
    assert np.all(np.isfinite(inv))
    assert_close(inv[:13], base[:13])
    assert_close(inv[13:], base[13:] / 8.0)
    # a bound just below an integer: index 13 sits half-way through the 0.001-wide step
    beta = 1024 / (2 * math.pi * math.exp(12.9995 * 2 * math.log(10000.0) / 64))
    inv, _ = rope.inv_freq(
        "yarn", 64, factor=8.0, original_length=1024, beta_fast=beta, beta_slow=beta, truncate=False
    )
    assert_close(inv[:13], base[:13])
    assert_close(inv[14:], base[14:] / 8.0)
    np.testing.assert_allclose(inv[13], base[13] * (0.5 + 0.5 / 8.0), rtol=2e-3)
    # truncated bounds both clamped to 0: index 0 extrapolated, the rest interpolated
    inv, _ = rope.inv_freq("yarn", 32, factor=8.0, original_length=4)
    assert rope.yarn_correction_range(32, 10000.0, 4) == (0, 0)
    base = ref_default(10000.0, 32)
    assert_close(inv[:1], base[:1])
    assert_close(inv[1:], base[1:] / 8.0)


@pytest.mark.parametrize(
    "factor,params,expected",
    [
        (4.0, {}, 0.1 * math.log(4.0) + 1),
        (1.0, {}, 1.0),
        (
            40.0,
            {"mscale": 1.0, "mscale_all_dim": 0.5},
            (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1),
        ),
        (4.0, {"mscale": 0.707, "mscale_all_dim": 0.707}, 1.0),
        (4.0, {"mscale": 1.0}, 0.1 * math.log(4.0) + 1),  # needs both
        (4.0, {"mscale": 0.0, "mscale_all_dim": 1.0}, 0.1 * math.log(4.0) + 1),  # 0 is unset
        (4.0, {"mscale": 2.0, "mscale_all_dim": 1.0, "attention_factor": 0.8}, 0.8),
        (1.0, {"mscale": 2.0, "mscale_all_dim": 1.0}, 1.0),
    ],
)
def test_yarn_attention_factor(factor, params, expected) -> None:
    _, att = rope.inv_freq("yarn", 32, factor=factor, original_length=512, **params)
    assert isinstance(att, float)
    assert att == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "d,theta,factor,length,lo,hi",
    [
        (128, 500000.0, 8.0, 8192, 1.0, 4.0),
        (64, 10000.0, 4.0, 1024, 2.0, 8.0),
        (16, 10000.0, 8.0, 64, 0.5, 1.5),
        (64, 10000.0, 1.0, 1024, 1.0, 4.0),
    ],
)
def test_llama3_closed_form(d, theta, factor, length, lo, hi) -> None:
    inv, att = rope.inv_freq(
        "llama3",
        d,
        theta=theta,
        factor=factor,
        original_length=length,
        low_freq_factor=lo,
        high_freq_factor=hi,
    )
    assert att == 1.0
    # float32 smoothing like HF: rounding of the smooth factor is amplified by up to factor
    assert_close(inv, ref_llama3(d, theta, factor, length, lo, hi), rtol=max(2e-6, factor * 3e-7))
    wavelength = 2 * np.pi / ref_default(theta, d)
    bands = (wavelength < length / hi, wavelength > length / lo)
    assert bands[0].any() and (d == 16 or bands[1].any())  # the grid reaches the outer bands


def test_llama3_band_boundaries() -> None:
    # theta 16, d 4: frequencies 1 and 1/4, wavelengths 2 pi and 8 pi; length 8.
    kw: dict[str, Any] = {"theta": 16.0, "factor": 8.0, "original_length": 8}
    # low threshold 8 / lo = 8 pi exactly at the second wavelength: smooth factor 0 -> f / factor
    inv, _ = rope.inv_freq("llama3", 4, low_freq_factor=1 / math.pi, high_freq_factor=4.0, **kw)
    np.testing.assert_allclose(inv[1], 0.25 / 8, rtol=1e-6)
    np.testing.assert_allclose(inv, ref_llama3(4, 16.0, 8.0, 8, 1 / math.pi, 4.0), rtol=1e-6)
    # high threshold 8 / hi = 2 pi exactly at the first wavelength: smooth factor 1 -> f
    inv, _ = rope.inv_freq("llama3", 4, low_freq_factor=0.5, high_freq_factor=4 / math.pi, **kw)
    np.testing.assert_allclose(inv[0], 1.0, rtol=1e-6)
    # just past the thresholds: the outer bands apply exactly
    inv, _ = rope.inv_freq("llama3", 4, low_freq_factor=0.33, high_freq_factor=1.27, **kw)
    np.testing.assert_array_equal(inv, np.float32([1.0, 0.25 / 8]))
    # both wavelengths strictly inside the medium band: strictly between f / factor and f
    inv, _ = rope.inv_freq("llama3", 4, low_freq_factor=0.3, high_freq_factor=1.3, **kw)
    np.testing.assert_allclose(inv, ref_llama3(4, 16.0, 8.0, 8, 0.3, 1.3), rtol=1e-6)
    assert 1 / 8 < inv[0] < 1 and 0.25 / 8 < inv[1] < 0.25
    # each wavelength ~2% inside its threshold: smoothed, visibly off the outer-band values
    inv, _ = rope.inv_freq("llama3", 4, low_freq_factor=0.3125, high_freq_factor=1.2992, **kw)
    np.testing.assert_allclose(inv, ref_llama3(4, 16.0, 8.0, 8, 0.3125, 1.2992), rtol=1e-6)
    assert inv[0] < 0.98 and inv[1] > 0.25 / 8 * 1.03


def test_longrope_short_long_switch_and_attention_factor() -> None:
    d, length, factor = 16, 1024, 4.0
    short = np.linspace(1.0, 1.1, d // 2)
    long_ = np.linspace(1.0, 6.0, d // 2)
    kw = {"factor": factor, "original_length": length, "short_factor": short, "long_factor": long_}
    base = ref_default(10000.0, d)
    expected_att = math.sqrt(1 + math.log(factor) / math.log(length))
    for seq_len, ext in [(None, short), (1, short), (length, short), (length + 1, long_)]:
        inv, att = rope.inv_freq("longrope", d, seq_len=seq_len, **kw)
        assert_close(inv, base / ext)
        assert att == pytest.approx(expected_att, rel=1e-12)
    _, att = rope.inv_freq("longrope", d, seq_len=length + 1, **{**kw, "factor": 1.0})
    assert att == 1.0
    _, att = rope.inv_freq("longrope", d, seq_len=length + 1, attention_factor=1.3, **kw)
    assert att == 1.3
    # plain lists work too
    inv, _ = rope.inv_freq(
        "longrope",
        d,
        seq_len=length + 1,
        **{**kw, "short_factor": short.tolist(), "long_factor": long_.tolist()},
    )
    assert_close(inv, base / long_)


def test_kinds_are_the_registered_methods() -> None:
    """The kinds, their parameters and the required ones all come from the registered classes
    (tests/model/scalings/test_registry.py checks each class)."""
    assert SCALINGS.names() == rope.ROPE_KINDS
    assert rope.ROPE_KINDS[0] == "default"
    required = {
        kind: {
            f.name for f in dataclasses.fields(SCALINGS[kind]) if f.default is dataclasses.MISSING
        }
        for kind in rope.ROPE_KINDS
    }
    # a method with required parameters gives the shared scaling tests an example of each
    assert {k: v for k, v in required.items() if v} == {
        k: set(v) for k, v in EXAMPLE_PARAMS.items()
    }
    assert required["llama3"] == {"low_freq_factor", "high_freq_factor"}
    assert required["longrope"] == {"short_factor", "long_factor"}
    for kind, names in required.items():
        for name in names:
            with pytest.raises(ValueError, match=f"parameter {name} is required for kind '{kind}'"):
                rope.scaling_config(kind, **dict.fromkeys(names - {name}, 1.0), **{name: None})


def test_scaling_config_is_typed_and_hashable() -> None:
    cfg = rope.scaling_config("yarn", beta_fast=16, mscale=None, truncate=False)
    assert isinstance(cfg, SCALINGS["yarn"]) and cfg.name == "yarn"
    assert (cfg.beta_fast, cfg.mscale, cfg.truncate) == (16, None, False)
    assert cfg == rope.scaling_config("yarn", beta_fast=16, truncate=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.beta_fast = 8  # type: ignore[misc]
    lr = rope.scaling_config("longrope", short_factor=np.ones(4), long_factor=[1, 2, 3, 4])
    assert lr.long_factor == (1.0, 2.0, 3.0, 4.0) and isinstance(lr.short_factor, tuple)
    assert hash(lr) == hash(
        rope.scaling_config("longrope", short_factor=(1,) * 4, long_factor=lr.long_factor)
    )
    allowed = "allowed: beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, truncate"
    with pytest.raises(
        ValueError, match=re.escape(f"unknown parameter 'foo' (value 1) for kind 'yarn'; {allowed}")
    ):
        rope.scaling_config("yarn", foo=1)
    with pytest.raises(ValueError, match="unknown RoPE kind 'nope'; allowed kinds: default, "):
        rope.scaling_config("nope")


# ----------------------------------------------------------------------------- HF golden values


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


GOLDEN_CASES = _golden()["cases"]
# Registered scalings that transformers does not implement, so the golden file (written by
# tests/fixtures/make_hf_rope_golden.py) has no case of them: kind -> why, declared by each
# scaling (`Scaling.not_in_hf`). Every other registered scaling must have golden cases, a new
# one included (its closed form is otherwise pinned by its own tests only).
NOT_IN_HF = {k: SCALINGS[k].not_in_hf for k in SCALINGS.names() if SCALINGS[k].not_in_hf}
MIN_GOLDEN_CASES = 5  # per HF scaling: several dims, thetas, factors and lengths


def test_golden_file_is_substantial() -> None:
    data = _golden()
    assert data["transformers_version"]
    assert len(data["cases"]) >= 60
    kinds = {c["kind"] for c in data["cases"]} | {c["kind"] for c in data["apply"]}
    assert kinds <= set(SCALINGS.names()), "golden cases of a kind that is not registered"
    assert "ntk" in NOT_IN_HF  # static NTK-aware: transformers has only the dynamic form


@pytest.mark.parametrize("kind", SCALINGS.names())
def test_every_registered_scaling_has_hf_golden_cases_or_is_not_in_hf(kind: str) -> None:
    cases = [c for c in GOLDEN_CASES if c["kind"] == kind]
    if kind in NOT_IN_HF:
        assert NOT_IN_HF[kind] and not cases, f"{kind!r} has golden cases: drop it from NOT_IN_HF"
    else:
        assert len(cases) >= MIN_GOLDEN_CASES, (
            f"{kind!r} has {len(cases)} HF golden cases: add cases to "
            "tests/fixtures/make_hf_rope_golden.py, or declare why not (Scaling.not_in_hf)"
        )


@pytest.mark.parametrize(
    "case",
    GOLDEN_CASES,
    ids=[
        f"{i}-{c['kind']}-d{c['rotary_dim']}-f{c['factor']:g}-L{c['original_length']}-s{c['seq_len']}"
        for i, c in enumerate(GOLDEN_CASES)
    ],
)
def test_matches_hf_golden(case: dict[str, Any]) -> None:
    inv, att = rope.inv_freq(
        case["kind"],
        case["rotary_dim"],
        theta=case["theta"],
        factor=case["factor"],
        original_length=case["original_length"],
        seq_len=case["seq_len"],
        **case["params"],
    )
    expected = np.asarray(case["inv_freq"], dtype=np.float32)
    assert inv.dtype == np.float32 and inv.shape == expected.shape
    np.testing.assert_allclose(inv, expected, rtol=1e-6, atol=0)
    assert att == pytest.approx(case["attention_factor"], rel=1e-12)


def test_matches_hf_golden_within_a_few_ulps() -> None:
    """Tighter than float32 precision: HF's float32 roundings (2i/d, YaRN ramp, llama3
    smoothing) are reproduced, so every case is within ~3 float32 ulps."""
    worst = 0.0
    for case in GOLDEN_CASES:
        inv, _ = rope.inv_freq(
            case["kind"],
            case["rotary_dim"],
            theta=case["theta"],
            factor=case["factor"],
            original_length=case["original_length"],
            seq_len=case["seq_len"],
            **case["params"],
        )
        expected = np.asarray(case["inv_freq"], dtype=np.float64)
        zero = expected == 0  # proportional's unrotated frequencies: exactly zero
        np.testing.assert_array_equal(inv[zero], 0.0)
        assert np.all(inv[~zero] != 0)
        if (~zero).any():
            rel = np.abs(inv[~zero] - expected[~zero]) / expected[~zero]
            worst = max(worst, float(np.max(rel)))
    assert worst < 4e-7


@pytest.mark.parametrize("case", _golden()["apply"], ids=lambda c: c["kind"])
def test_apply_matches_hf_golden(case: dict[str, Any]) -> None:
    inv, att = rope.inv_freq(
        case["kind"],
        case["rotary_dim"],
        factor=case["factor"],
        original_length=case["original_length"],
        **case["params"],
    )
    np.testing.assert_allclose(inv, np.float32(case["inv_freq"]), rtol=1e-6)
    assert att == pytest.approx(case["attention_factor"], rel=1e-12)
    x = jnp.asarray(case["x"], dtype=jnp.float32)
    out = rotation.apply_rotary(x, jnp.asarray(case["positions"]), inv, att)
    np.testing.assert_allclose(np.asarray(out), np.asarray(case["out"]), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- rotation


def ref_rotate(x: np.ndarray, positions: np.ndarray, inv: np.ndarray, att: float) -> np.ndarray:
    """Half-split rotation as complex multiplication: pair (j, j + r/2) is one complex number."""
    r = 2 * len(inv)
    h = r // 2
    z = x[..., :h].astype(np.float64) + 1j * x[..., h:r].astype(np.float64)
    angle = positions.astype(np.float64)[..., :, None, None] * inv.astype(np.float64)
    z = z * np.exp(1j * angle) * att
    return np.concatenate([z.real, z.imag, x[..., r:]], axis=-1)


def test_rotate_half() -> None:
    x = jnp.arange(1.0, 7.0)
    np.testing.assert_array_equal(rotation.rotate_half(x), [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_apply_matches_complex_rotation(batch: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(*batch, 7, 3, 20)).astype(np.float32)
    positions = rng.uniform(0, 300, size=(*batch, 7)).astype(np.float32)
    inv, att = rope.inv_freq("yarn", 16, factor=4.0, original_length=64)
    out = rotation.apply_rotary(jnp.asarray(x), jnp.asarray(positions), inv, att)
    assert out.shape == x.shape and out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), ref_rotate(x, positions, inv, att), atol=2e-4)


def test_apply_shared_positions_broadcast_over_batch() -> None:
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(4, 5, 2, 8)), dtype=jnp.float32)
    positions = jnp.arange(5) * 7
    inv, _ = rope.inv_freq("default", 8)
    out = rotation.apply_rotary(x, positions, inv, 1.0)
    for b in range(4):
        np.testing.assert_allclose(
            out[b], rotation.apply_rotary(x[b], positions, inv, 1.0), atol=1e-6
        )


def test_norm_preserved_and_scaled() -> None:
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(2, 9, 4, 32)), dtype=jnp.float32)
    positions = jnp.asarray(rng.integers(0, 10_000, size=(2, 9)))
    inv, _ = rope.inv_freq("default", 32)
    out = rotation.apply_rotary(x, positions, inv, 1.0)
    np.testing.assert_allclose(
        jnp.linalg.norm(out, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5
    )
    scaled = rotation.apply_rotary(x, positions, inv, 1.5)
    np.testing.assert_allclose(scaled, 1.5 * out, rtol=1e-5, atol=1e-6)


def test_partial_rotary_leaves_tail_untouched() -> None:
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(6, 2, 24)), dtype=jnp.float32)
    inv, _ = rope.inv_freq("linear", 16, factor=2.0)
    out = rotation.apply_rotary(x, jnp.arange(6) + 100, inv, 2.0)
    np.testing.assert_array_equal(out[..., 16:], x[..., 16:])
    assert not np.allclose(out[..., :16], x[..., :16])
    np.testing.assert_allclose(
        jnp.linalg.norm(out[..., :16], axis=-1),
        2.0 * jnp.linalg.norm(x[..., :16], axis=-1),
        rtol=1e-5,
    )
    np.testing.assert_array_equal(rotation.apply_rotary(x, jnp.zeros(6), inv, 1.0), x)


@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.integers(0, 400),
    n=st.integers(0, 400),
    shift=st.integers(-400, 400),
    kind=st.sampled_from(["default", "yarn", "ntk"]),
)
@SETTINGS
def test_dot_product_depends_only_on_offset(seed, m, n, shift, kind) -> None:
    if min(m, n) + shift < 0:
        shift = -min(m, n)
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, 1, 16)).astype(np.float32)
    k = rng.normal(size=(1, 1, 16)).astype(np.float32)
    inv, att = rope.inv_freq(kind, 16, factor=4.0, original_length=64)

    def dot(a: int, b: int) -> float:
        qa = rotation.apply_rotary(jnp.asarray(q), jnp.asarray([a]), inv, att)
        kb = rotation.apply_rotary(jnp.asarray(k), jnp.asarray([b]), inv, att)
        return float(jnp.sum(qa * kb))

    scale = float(np.linalg.norm(q) * np.linalg.norm(k)) * att**2
    assert dot(m, n) == pytest.approx(dot(m + shift, n + shift), abs=1e-4 * scale + 1e-6)


def test_jit_with_traced_frequencies_and_dtypes() -> None:
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.normal(size=(5, 2, 12)), dtype=jnp.float32)
    positions = jnp.arange(5)
    inv, att = rope.inv_freq("yarn", 8, factor=4.0, original_length=16)
    eager = rotation.apply_rotary(x, positions, inv, att)
    jitted = jax.jit(rotation.apply_rotary)(x, positions, jnp.asarray(inv), jnp.asarray(att))
    np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)
    half = rotation.apply_rotary(x.astype(jnp.bfloat16), positions.astype(jnp.float32), inv, att)
    assert half.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(half, dtype=np.float32), eager, rtol=2e-2, atol=2e-2)


def test_apply_rejects_too_many_frequencies() -> None:
    inv, _ = rope.inv_freq("default", 16)
    with pytest.raises(ValueError, match="rotates 16 dims"):
        rotation.apply_rotary(jnp.zeros((3, 1, 8)), jnp.arange(3), inv, 1.0)


# ----------------------------------------------------------------------------- validation

SHORT8 = [1.0] * 8
ERRORS: list[tuple[str, int, dict[str, Any], str]] = [
    ("rope", 16, {}, r"unknown RoPE kind 'rope'; allowed kinds: default, linear, ntk, dynamic"),
    ("default", 7, {}, r"rotary_dim .*got 7"),
    ("default", 0, {}, r"rotary_dim .*got 0"),
    ("linear", 16.0, {}, r"rotary_dim .*got 16\.0"),
    ("ntk", 2, {}, r"rotary_dim .*'ntk'.*got 2"),
    ("dynamic", 2, {"original_length": 8}, r"rotary_dim .*'dynamic'.*got 2"),
    ("default", 16, {"theta": -1.0}, r"theta .*got -1\.0"),
    ("default", 16, {"theta": 0}, r"theta .*got 0"),
    ("default", 16, {"theta": float("nan")}, r"theta .*got nan"),
    ("yarn", 16, {"theta": 1.0, "original_length": 8}, r"theta .*'yarn'.*got 1\.0"),
    ("linear", 16, {"factor": 0.5}, r"factor must be .*>= 1, got 0\.5"),
    ("linear", 16, {"factor": "2"}, r"factor must be .*got '2'"),
    ("dynamic", 16, {}, r"original_length .*required for kind 'dynamic', got None"),
    ("yarn", 16, {}, r"original_length .*required for kind 'yarn', got None"),
    ("llama3", 16, {"low_freq_factor": 1, "high_freq_factor": 4}, r"original_length .*'llama3'"),
    ("longrope", 16, {"short_factor": SHORT8, "long_factor": SHORT8}, r"original_length .*None"),
    ("yarn", 16, {"original_length": 0}, r"original_length .*got 0"),
    ("yarn", 16, {"original_length": 64.0}, r"original_length .*got 64\.0"),
    ("dynamic", 16, {"original_length": 8, "seq_len": -3}, r"seq_len .*got -3"),
    ("yarn", 16, {"original_length": 8, "foo": 1}, r"unknown parameter 'foo' \(value 1\) .*'yarn'"),
    ("linear", 16, {"beta_fast": 4}, r"unknown parameter 'beta_fast' \(value 4\).*allowed: none"),
    ("llama3", 16, {"original_length": 8, "high_freq_factor": 4}, r"low_freq_factor .*required"),
    ("llama3", 16, {"original_length": 8, "low_freq_factor": 1}, r"high_freq_factor .*required"),
    (
        "llama3",
        16,
        {"original_length": 8, "low_freq_factor": 2.0, "high_freq_factor": 2.0},
        r"high_freq_factor must be .*> 2\.0, got 2\.0",
    ),
    (
        "llama3",
        16,
        {"original_length": 8, "low_freq_factor": -1.0, "high_freq_factor": 2.0},
        r"low_freq_factor .*got -1\.0",
    ),
    ("longrope", 16, {"original_length": 8, "long_factor": SHORT8}, r"short_factor .*required"),
    (
        "longrope",
        16,
        {"original_length": 8, "short_factor": [1.0] * 7, "long_factor": SHORT8},
        r"short_factor must have length 8 \(rotary_dim // 2\), got shape \(7,\)",
    ),
    (
        "longrope",
        16,
        {"original_length": 8, "short_factor": SHORT8, "long_factor": [1.0] * 9},
        r"long_factor must have length 8 .*\(9,\)",
    ),
    (
        "longrope",
        16,
        {"original_length": 8, "short_factor": SHORT8, "long_factor": [0.0] * 8},
        r"long_factor must hold finite positive numbers",
    ),
    (
        "longrope",
        16,
        {"original_length": 8, "short_factor": "abc", "long_factor": SHORT8},
        r"short_factor must be a sequence .*'abc'",
    ),
    (
        "longrope",
        16,
        {"original_length": 1, "factor": 2.0, "short_factor": SHORT8, "long_factor": SHORT8},
        r"original_length must be >= 2 .*got 1",
    ),
    ("yarn", 16, {"original_length": 8, "beta_fast": 0}, r"beta_fast .*got 0"),
    ("yarn", 16, {"original_length": 8, "beta_slow": -1.0}, r"beta_slow .*got -1\.0"),
    ("yarn", 16, {"original_length": 8, "mscale": -1.0}, r"mscale .*got -1\.0"),
    ("yarn", 16, {"original_length": 8, "mscale_all_dim": "x"}, r"mscale_all_dim .*got 'x'"),
    ("yarn", 16, {"original_length": 8, "attention_factor": 0.0}, r"attention_factor .*got 0\.0"),
    ("yarn", 16, {"original_length": 8, "truncate": "yes"}, r"truncate must be a bool, got 'yes'"),
]


@pytest.mark.parametrize(
    "func", [rope.inv_freq, rope.validate_scaling], ids=["inv_freq", "validate"]
)
@pytest.mark.parametrize(
    "kind,d,kwargs,match", ERRORS, ids=[f"{i}-{e[0]}" for i, e in enumerate(ERRORS)]
)
def test_value_errors_name_the_parameter(func, kind, d, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        func(kind, d, **kwargs)


def test_validate_scaling_accepts_valid_and_none_optionals() -> None:
    assert rope.validate_scaling("yarn", 16, factor=4.0, original_length=64) is None
    assert (
        rope.validate_scaling(
            "yarn", 16, factor=4.0, original_length=64, mscale=None, attention_factor=None
        )
        is None
    )
    assert rope.validate_scaling("default", 2, factor=4.0, original_length=64) is None
    assert rope.validate_scaling("ntk", 4, factor=np.float32(2.0)) is None
    msg = re.escape("allowed kinds: " + ", ".join(rope.ROPE_KINDS))
    with pytest.raises(ValueError, match=msg):
        rope.validate_scaling("nope", 16)

"""`ntk_by_parts`: YaRN's frequencies with an attention factor of exactly 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.model import rope
from tests.model.scalings import reference as ref

GOLDEN = Path(__file__).parents[2] / "fixtures" / "hf_rope_golden.json"
RAMP = ("beta_fast", "beta_slow", "truncate")


@given(
    d=st.integers(2, 64).map(lambda h: 2 * h),
    theta=st.sampled_from([100.0, 10000.0, 500000.0]),
    factor=st.floats(1.0, 64.0),
    length=st.integers(1, 1 << 17),
    betas=st.sampled_from([(None, None), (16.0, 2.0), (4.0, 4.0), (64.0, 0.5)]),
    truncate=st.sampled_from([None, True, False]),
)
@settings(max_examples=80, deadline=None)
def test_closed_form(d, theta, factor, length, betas, truncate) -> None:
    params = {"beta_fast": betas[0], "beta_slow": betas[1], "truncate": truncate}
    inv, att = rope.inv_freq(
        "ntk_by_parts", d, theta=theta, factor=factor, original_length=length, **params
    )
    assert inv.dtype == np.float32 and inv.shape == (d // 2,)
    assert att == 1.0 and isinstance(att, float)
    expected = ref.ntk_by_parts(
        d, theta, factor, length, betas[0] or 32.0, betas[1] or 1.0, truncate is not False
    )
    # float32 ramp (as HF): its rounding (~6e-8) is amplified by (factor - 1) in the blend
    np.testing.assert_allclose(
        inv.astype(np.float64), expected, rtol=max(2e-6, factor * 1e-7), atol=0
    )


@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0, 40.0])
@pytest.mark.parametrize(
    "params",
    [{}, {"truncate": False}, {"beta_fast": 16, "beta_slow": 2}, {"mscale": 1.0,
     "mscale_all_dim": 0.5}, {"attention_factor": 0.7}],
)  # fmt: skip
def test_yarn_without_its_attention_factor(factor: float, params: dict[str, Any]) -> None:
    """The same bits as `yarn` at every factor and ramp parameter, whatever YaRN's attention
    factor would be."""
    kw = {"factor": factor, "original_length": 2048, "theta": 10000.0}
    yarn, yarn_att = rope.inv_freq("yarn", 64, **kw, **params)
    parts, att = rope.inv_freq(
        "ntk_by_parts", 64, **kw, **{k: v for k, v in params.items() if k in RAMP}
    )
    np.testing.assert_array_equal(parts, yarn)
    assert att == 1.0
    assert yarn_att != 1.0 or factor == 1.0  # the arms differ there: YaRN's factor is not 1


def test_regions_of_the_ramp() -> None:
    """d 64, L 2048: the ramp runs over pairs 8..21 (8.06 floored, 20.1 ceiled); below it the
    frequencies are direct RoPE's, above it divided by the factor."""
    base, _ = rope.inv_freq("default", 64)
    inv, _ = rope.inv_freq("ntk_by_parts", 64, factor=4.0, original_length=2048)
    np.testing.assert_array_equal(inv[:9], base[:9])
    np.testing.assert_allclose(inv[21:], base[21:] / 4.0, rtol=1e-6)
    assert np.all((inv[9:21] < base[9:21]) & (inv[9:21] > base[9:21] / 4.0))


def test_matches_hf_yarn_golden_frequencies() -> None:
    """transformers' `yarn` frequencies (the golden file) do not depend on its attention
    factor: `ntk_by_parts` with the same ramp parameters gives them, with attention 1."""
    cases = [c for c in json.loads(GOLDEN.read_text())["cases"] if c["kind"] == "yarn"]
    assert len(cases) >= 5
    for case in cases:
        inv, att = rope.inv_freq(
            "ntk_by_parts",
            case["rotary_dim"],
            theta=case["theta"],
            factor=case["factor"],
            original_length=case["original_length"],
            seq_len=case["seq_len"],
            **{k: v for k, v in case["params"].items() if k in RAMP},
        )
        np.testing.assert_allclose(inv, np.asarray(case["inv_freq"], np.float32), rtol=1e-6)
        assert att == 1.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"theta": 1.0}, r"theta must be > 1 for kind 'ntk_by_parts' .*got 1\.0"),
        ({"beta_fast": 0}, r"beta_fast .*got 0"),
        ({"beta_slow": -1.0}, r"beta_slow .*got -1\.0"),
        ({"truncate": "yes"}, r"truncate must be a bool, got 'yes'"),
        ({"mscale": 1.0}, r"unknown parameter 'mscale' \(value 1\.0\) for kind 'ntk_by_parts'; "
         r"allowed: beta_fast, beta_slow, truncate"),
        ({"original_length": None}, r"original_length .*required for kind 'ntk_by_parts'"),
    ],
)  # fmt: skip
def test_errors_name_the_parameter(kwargs: dict[str, Any], match: str) -> None:
    args = {"factor": 4.0, "original_length": 64, **kwargs}
    for func in (rope.inv_freq, rope.validate_scaling):
        with pytest.raises(ValueError, match=match):
            func("ntk_by_parts", 16, **args)

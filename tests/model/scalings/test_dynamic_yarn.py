"""`dynamic_yarn`: YaRN at s = min(factor, max(1, seq_len / L)) (the paper's dynamic scaling
s = max(1, l' / L), capped at the configured factor)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.model import rope
from rope_lab.model.transformer import with_scaling
from rope_lab.registry import SCALINGS
from tests.model.scalings import reference as ref


def ref_dynamic_yarn(
    d: int, theta: float, factor: float, length: int, seq_len: int | None
) -> tuple[list[float], float]:
    scale = 1.0 if seq_len is None else min(factor, max(1.0, seq_len / length))
    if scale == 1.0:
        return [theta ** (-2.0 * i / d) for i in range(d // 2)], 1.0
    return ref.ntk_by_parts(d, theta, scale, length), ref.yarn_attention(scale)


@given(
    d=st.integers(2, 64).map(lambda h: 2 * h),
    theta=st.sampled_from([100.0, 10000.0, 500000.0]),
    factor=st.floats(1.0, 64.0),
    length=st.integers(1, 1 << 14),
    ratio=st.floats(0.0, 100.0),
)
@settings(max_examples=80, deadline=None)
def test_closed_form(d, theta, factor, length, ratio) -> None:
    seq_len = max(1, round(ratio * length))
    inv, att = rope.inv_freq(
        "dynamic_yarn", d, theta=theta, factor=factor, original_length=length, seq_len=seq_len
    )
    want, want_att = ref_dynamic_yarn(d, theta, factor, length, seq_len)
    assert inv.dtype == np.float32 and inv.shape == (d // 2,)
    np.testing.assert_allclose(inv.astype(np.float64), want, rtol=max(2e-6, factor * 1e-7), atol=0)
    assert att == pytest.approx(want_att, rel=1e-12)


@given(
    d=st.sampled_from([4, 16, 64]),
    factor=st.floats(1.0, 16.0),
    length=st.integers(1, 5000),
    frac=st.floats(0.0, 1.0),
)
@settings(max_examples=40, deadline=None)
def test_direct_rope_up_to_the_training_length(d, factor, length, frac) -> None:
    default, _ = rope.inv_freq("default", d)
    for seq_len in (max(1, int(frac * length)), None):
        inv, att = rope.inv_freq(
            "dynamic_yarn", d, factor=factor, original_length=length, seq_len=seq_len
        )
        np.testing.assert_array_equal(inv, default)
        assert att == 1.0


@pytest.mark.parametrize("seq_len", [65, 96, 128, 200, 256])
@pytest.mark.parametrize("params", [{}, {"truncate": False, "beta_fast": 16.0}])
def test_static_yarn_at_the_current_scale(seq_len: int, params: dict[str, Any]) -> None:
    """Between L and factor x L: yarn at seq_len / L, bit for bit; past factor x L: yarn at
    the factor."""
    length, factor = 64, 3.0
    inv, att = rope.inv_freq(
        "dynamic_yarn", 32, factor=factor, original_length=length, seq_len=seq_len, **params
    )
    scale = min(factor, seq_len / length)
    yarn, yarn_att = rope.inv_freq("yarn", 32, factor=scale, original_length=length, **params)
    np.testing.assert_array_equal(inv, yarn)
    assert att == yarn_att == pytest.approx(0.1 * np.log(scale) + 1, rel=1e-12)


def test_the_factor_caps_the_scale() -> None:
    """At 4 x L the scale is 4 whatever factor >= 4 is set; a factor of 2 holds it at 2."""
    at = {
        f: rope.inv_freq("dynamic_yarn", 16, factor=f, original_length=64, seq_len=256)
        for f in (2.0, 4.0, 100.0)
    }
    np.testing.assert_array_equal(at[4.0][0], at[100.0][0])
    assert at[4.0][1] == at[100.0][1]
    assert not np.array_equal(at[2.0][0], at[4.0][0]) and at[2.0][1] < at[4.0][1]


@pytest.mark.parametrize(
    "params,seq_len,expected",
    [
        ({"attention_factor": 0.8}, 256, 0.8),
        ({"attention_factor": 0.8}, 64, 1.0),  # direct RoPE up to L
        ({"mscale": 1.0, "mscale_all_dim": 0.5}, 256,
         (0.1 * np.log(4) + 1) / (0.05 * np.log(4) + 1)),
        ({"mscale": 1.0, "mscale_all_dim": 1.0}, 256, 1.0),
    ],
)  # fmt: skip
def test_attention_parameters_are_yarns(params, seq_len, expected) -> None:
    _, att = rope.inv_freq(
        "dynamic_yarn", 16, factor=8.0, original_length=64, seq_len=seq_len, **params
    )
    assert att == pytest.approx(expected, rel=1e-12)


def test_declared_length_dependent_with_yarns_parameters() -> None:
    cls = SCALINGS["dynamic_yarn"]
    assert cls.length_dependent and cls.needs_original_length and cls.uses_factor
    assert [f.name for f in cls.__dataclass_fields__.values()] == [
        f.name for f in SCALINGS["yarn"].__dataclass_fields__.values()
    ]
    with pytest.raises(ValueError, match=r"theta must be > 1 for kind 'dynamic_yarn'"):
        rope.validate_scaling("dynamic_yarn", 16, theta=1.0, factor=2.0, original_length=8)


def test_with_scaling_takes_the_length() -> None:
    """A model under dynamic YaRN: its rotary frequencies at 4 x L_train are yarn x4's, and at
    L_train direct RoPE's."""
    from rope_lab.config import validate
    from rope_lab.model.factory import make_model
    from tests.helpers import tiny_trial

    model = make_model(validate(tiny_trial("rope", width=16, head_dim=8, length=16)))

    def freqs(m):
        return np.asarray(m.position.inv_freq.value), float(
            np.asarray(m.position.attention_factor.value)
        )

    long = freqs(with_scaling(model, "dynamic_yarn", 8.0, None, seq_len=64))
    yarn = freqs(with_scaling(model, "yarn", 4.0, None, seq_len=64))
    short = freqs(with_scaling(model, "dynamic_yarn", 8.0, None, seq_len=16))
    np.testing.assert_array_equal(long[0], yarn[0])
    assert long[1] == yarn[1] > 1.0
    np.testing.assert_array_equal(short[0], freqs(model)[0])
    assert short[1] == 1.0

"""Every registered RoPE scaling method: its class attributes, and that they say what it does."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from rope_lab.model import rope
from rope_lab.model.scalings import Scaling
from rope_lab.registry import SCALINGS, UnknownName

KINDS = SCALINGS.names()
# Required parameters of the methods that have any; every other method runs with none.
EXAMPLE_PARAMS: dict[str, dict[str, Any]] = {
    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "longrope": {"short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [1.0, 2.0, 4.0, 8.0]},
}


def frequencies(kind: str, **kw: Any) -> tuple[np.ndarray, float]:
    args: dict[str, Any] = {"factor": 4.0, "original_length": 64, "seq_len": 64}
    return rope.inv_freq(kind, 8, **{**args, **EXAMPLE_PARAMS.get(kind, {}), **kw})


def test_registry_order_and_kinds() -> None:
    assert KINDS[0] == "default"
    assert KINDS == rope.ROPE_KINDS
    assert set(KINDS) >= {
        "linear", "ntk", "dynamic", "yarn", "ntk_by_parts", "dynamic_yarn", "llama3", "longrope",
        "proportional",
    }  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_class_attributes(kind: str) -> None:
    cls = SCALINGS[kind]
    assert issubclass(cls, Scaling) and dataclasses.is_dataclass(cls) and cls.name == kind
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for attr in ("needs_original_length", "length_dependent", "uses_factor"):
        assert isinstance(getattr(cls, attr), bool), attr
    assert isinstance(cls.min_rotary_dim, int) and cls.min_rotary_dim in (2, 4)
    assert isinstance(cls.order, int)
    assert len(cls.colors) == 2
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in cls.colors), cls.colors
    assert callable(cls.check) and callable(cls.inv_freq)


def test_orders_and_colours_distinct() -> None:
    classes = [SCALINGS[k] for k in KINDS]
    assert sorted(c.order for c in classes) == [c.order for c in classes]
    assert len({c.order for c in classes}) == len(classes)
    assert len({c.colors for c in classes}) == len(classes)


def test_colours_of_the_plot_palette() -> None:
    """The (light, dark) pairs the figures have always used for the methods."""
    expected = {
        "default": ("#d62728", "#d62728"),
        "linear": ("#9ecae1", "#08519c"),
        "ntk": ("#c6b3e6", "#54278f"),
        "dynamic": ("#dfc27d", "#8c510a"),
        "yarn": ("#f7a8cf", "#ae017e"),
        "llama3": ("#99e0e8", "#0e8b99"),
        "longrope": ("#d9d98c", "#6b6b00"),
        "ntk_by_parts": ("#c994c7", "#67001f"),
        "dynamic_yarn": ("#a1d99b", "#00441b"),
    }
    assert {k: SCALINGS[k].colors for k in expected} == expected


@pytest.mark.parametrize("kind", KINDS)
def test_length_dependent_means_seq_len_matters(kind: str) -> None:
    at_train, _ = frequencies(kind)
    longer, _ = frequencies(kind, seq_len=256)
    assert (not np.array_equal(at_train, longer)) == SCALINGS[kind].length_dependent


@pytest.mark.parametrize("kind", KINDS)
def test_uses_factor_means_factor_matters(kind: str) -> None:
    """At 16 x the training length, past both factors (dynamic YaRN's scale is capped by its
    factor: at 4 x the length, factors 4 and 8 both give scale 4)."""
    a = frequencies(kind, seq_len=1024)
    b = frequencies(kind, seq_len=1024, factor=8.0)
    differs = not np.array_equal(a[0], b[0]) or a[1] != b[1]
    if SCALINGS[kind].remaps:  # the frequencies stay; the position sets carry the factor
        config = rope.scaling_config(kind, **EXAMPLE_PARAMS.get(kind, {}))
        differs = config.rule(4.0, 64) != config.rule(8.0, 64)
    assert differs == SCALINGS[kind].uses_factor


@pytest.mark.parametrize("kind", KINDS)
def test_needs_original_length(kind: str) -> None:
    if SCALINGS[kind].needs_original_length:
        with pytest.raises(ValueError, match=f"original_length .*required for kind '{kind}'"):
            frequencies(kind, original_length=None)
    else:
        frequencies(kind, original_length=None)


@pytest.mark.parametrize("kind", KINDS)
def test_min_rotary_dim(kind: str) -> None:
    low = SCALINGS[kind].min_rotary_dim
    params = dict(EXAMPLE_PARAMS.get(kind, {}))
    for name in ("short_factor", "long_factor"):
        if name in params:
            params[name] = params[name][: low // 2]
    kw = {"factor": 4.0, "original_length": 64, **params}
    inv, _ = rope.inv_freq(kind, low, **kw)
    assert inv.shape == (low // 2,)
    if low > 2:
        with pytest.raises(ValueError, match=f"rotary_dim must be >= {low} for kind '{kind}'"):
            rope.validate_scaling(kind, low - 2, **kw)


def test_unknown_kind_names_the_allowed() -> None:
    listed = ", ".join(KINDS)
    for func in (rope.inv_freq, rope.validate_scaling):
        with pytest.raises(ValueError, match=re.escape(f"allowed kinds: {listed}")):
            func("yarnn", 16)
    with pytest.raises(UnknownName, match=re.escape(f"(did you mean 'yarn'?); allowed: {listed}")):
        SCALINGS["yarnn"]

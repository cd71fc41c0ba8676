"""One override point for a rotary encoding's frequencies (`RotaryConfig.frequencies`), used
when the model is built and under every scaling and remap. The laws hold for every registered
rotary encoding and for a HoPE-style one written as `RotaryConfig`'s docstring says."""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import numpy as np
import pytest

from rope_lab.config import ModelConfig, PositionConfig
from rope_lab.model import rope
from rope_lab.model.positions.modules.remapped import RemappedRotary
from rope_lab.model.positions.modules.rotary import RotaryPE
from rope_lab.model.positions.rotary import RotaryConfig
from rope_lab.registry import POSITIONS, SCALINGS

TRAIN_LENGTH = 16


@dataclass(frozen=True)
class HopeConfig(RotaryConfig):
    """HoPE-style (Chen et al. 2024): the `zeroed` lowest-frequency pairs do not rotate."""

    zeroed: int = 2

    def frequencies(self, model, train_length, **scaling):
        inv, attention_factor = super().frequencies(model, train_length, **scaling)
        inv = np.array(inv)
        inv[len(inv) - self.zeroed :] = 0.0
        return inv, attention_factor


@dataclass(frozen=True)
class FrequenciesInModuleConfig(RotaryConfig):
    """A subclass changing frequencies where it should not (in `make_module`)."""

    def make_module(self, inv_freq, attention_factor, model):
        return RotaryPE(np.zeros_like(inv_freq), attention_factor)


ROTARY = [POSITIONS[k]() for k in POSITIONS.names() if POSITIONS[k].supports_scaling]
ENCODINGS = [*ROTARY, HopeConfig()]
# parameters a method needs at the tiny model's 4 rotary pairs
PARAMS = {
    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "longrope": {"short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 3.0, 4.0]},
    "proportional": {"partial_rotary_factor": 0.5},
}
FREQUENCY_METHODS = [k for k in SCALINGS.names() if not SCALINGS[k].remaps]
REMAPS = [k for k in SCALINGS.names() if SCALINGS[k].remaps]


def _model(options: RotaryConfig) -> ModelConfig:
    return ModelConfig(width=16, head_dim=8, position=PositionConfig(kind="rope", options=options))


def _built(options: RotaryConfig) -> RotaryPE:
    m = _model(options)
    return options.build(m, max_length=64, train_length=TRAIN_LENGTH, key=None)


def _scaled(options: RotaryConfig, encoding, kind: str, factor: float, seq_len=TRAIN_LENGTH):
    return options.with_scaling(
        encoding,
        _model(options),
        train_length=TRAIN_LENGTH,
        kind=kind,
        factor=factor,
        params=PARAMS.get(kind),
        seq_len=seq_len,
    )


def _arrays(encoding) -> list[np.ndarray]:
    return [np.asarray(x) for x in eqx.filter(encoding, eqx.is_array).__dict__.values()]


def _inv(encoding) -> np.ndarray:
    return np.asarray(encoding.inv_freq.get())


@pytest.mark.parametrize("options", ENCODINGS, ids=lambda o: type(o).__name__)
def test_under_its_own_trained_scaling_the_encoding_is_the_built_one(options):
    built = _built(options)
    kind, factor, params = options.trained_scaling()
    again = _scaled(options, built, kind, factor)
    assert eqx.tree_equal(eqx.filter(again, eqx.is_array), eqx.filter(built, eqx.is_array))
    assert params == ()


@pytest.mark.parametrize("options", ENCODINGS, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("kind", FREQUENCY_METHODS)
def test_a_scaling_changes_only_the_frequencies_it_changes(options, kind):
    """Pairs whose plain-RoPE frequency a method leaves as it is keep the built encoding's
    frequency (a zeroed HoPE pair stays zero under default x1, a high-frequency pair stays under
    YaRN); the others are the encoding's own `frequencies` under the method."""
    built = _built(options)
    scaled = _scaled(options, built, kind, 4.0)
    params = PARAMS.get(kind, {})
    plain = rope.inv_freq("default", 8, theta=options.theta)[0]
    under = rope.inv_freq(
        kind, 8, theta=options.theta, factor=4.0, original_length=TRAIN_LENGTH,
        seq_len=TRAIN_LENGTH, **params,
    )[0]  # fmt: skip
    kept = np.isclose(plain, under, rtol=0, atol=0)
    np.testing.assert_array_equal(_inv(scaled)[kept], _inv(built)[kept])
    own, _ = options.frequencies(
        _model(options), TRAIN_LENGTH, kind=kind, factor=4.0, params=params, seq_len=TRAIN_LENGTH
    )
    np.testing.assert_allclose(_inv(scaled), own, rtol=1e-7)
    if isinstance(options, HopeConfig):
        assert (_inv(scaled)[-options.zeroed :] == 0).all(), kind


@pytest.mark.parametrize("options", ENCODINGS, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("kind", REMAPS)
def test_a_remap_keeps_the_built_frequencies(options, kind):
    built = _built(options)
    remapped = _scaled(options, built, kind, 4.0)
    assert isinstance(remapped, RemappedRotary)
    assert eqx.tree_equal(eqx.filter(remapped.inner, eqx.is_array), eqx.filter(built, eqx.is_array))


def test_frequencies_are_set_in_one_place_only():
    """`make_module` builds the module around the frequencies `frequencies` gives; what it
    does to them does not survive, so the trained encoding and its scaled versions agree."""
    options = FrequenciesInModuleConfig()
    built = _built(options)
    plain, _ = options.frequencies(_model(options), TRAIN_LENGTH)
    np.testing.assert_array_equal(_inv(built), plain)
    same = _scaled(options, built, "default", 1.0)
    np.testing.assert_array_equal(_inv(same), _inv(built))


def test_the_hope_style_encoding_keeps_its_zeroed_pairs_as_trained():
    built = _built(HopeConfig(zeroed=3))
    assert (_inv(built)[-3:] == 0).all() and (_inv(built)[:-3] > 0).all()

"""Position encodings: ALiBi slopes, random positions, RoPE scaling placement.

The defining law of each encoding on the whole model's logits:
tests/model/positions/test_position_laws.py.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.model.positions import alibi_slopes
from rope_lab.model.positions.modules import random_positions
from rope_lab.model.transformer import with_scaling
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial


def test_alibi_slopes_power_of_two():
    # Press et al. (2022): for 8 heads the slopes are 1/2, 1/4, ..., 1/256.
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(h + 1) for h in range(8)])


def test_alibi_slopes_twelve_heads():
    # Not a power of two: the 8-head slopes, then every other slope of the 16-head sequence.
    eight = [2.0 ** -(h + 1) for h in range(8)]
    sixteen = [2.0 ** (-0.5 * (h + 1)) for h in range(16)]
    np.testing.assert_allclose(alibi_slopes(12), eight + sixteen[0::2][:4])
    assert len(set(alibi_slopes(12))) == 12


def test_alibi_slopes_reject_nonpositive():
    with pytest.raises(ValueError, match="heads"):
        alibi_slopes(0)


@given(length=st.integers(1, 40), extra=st.integers(0, 200), seed=st.integers(0, 1000))
def test_random_positions_are_sorted_distinct_in_range(length, extra, seed):
    max_length = length + extra
    pos = np.asarray(random_positions(length, max_length, key=jax.random.PRNGKey(seed)))
    assert pos.shape == (length,)
    assert np.all(np.diff(pos) > 0)
    assert pos.min() >= 0 and pos.max() < max_length


def test_rope_scaling_keeps_the_placement_so_compiled_programs_are_reused():
    model = jax.device_put(make_model(tiny_trial("rope")), jax.devices()[0])  # committed
    arrays, static = eqx.partition(model, eqx.is_array)
    forward = jax.jit(lambda a, t: eqx.combine(a, static)(t))
    tokens = jnp.arange(8) % 4
    forward(arrays, tokens)
    for kind, factor in [("linear", 2.0), ("yarn", 4.0), ("dynamic", 2.0)]:
        scaled = with_scaling(model, kind, factor, seq_len=16)
        freqs = scaled.position.inv_freq.value
        assert freqs.committed and freqs.sharding == model.position.inv_freq.value.sharding
        forward(eqx.filter(scaled, eqx.is_array), tokens)
    assert forward._cache_size() == 1

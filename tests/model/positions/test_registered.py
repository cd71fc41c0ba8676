"""Laws every registered position encoding obeys (a new encoding is checked by these too)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import replace, validate
from rope_lab.model.positions import EncodingConfig
from rope_lab.model.positions.modules import PositionEncoding
from rope_lab.model.transformer import count_params
from rope_lab.registry import POSITIONS
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

KINDS = POSITIONS.names()


def test_core_kinds_are_registered_in_legend_order():
    assert KINDS[:5] == ("none", "learned", "sinusoidal", "alibi", "rope")
    orders = [POSITIONS[k].order for k in KINDS]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert len({POSITIONS[k].color for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_attributes_and_hooks_agree_with_what_the_module_does(kind):
    cfg = validate(tiny_trial(kind))
    options = cfg.model.position.options
    assert isinstance(options, EncodingConfig) and type(options) is POSITIONS[kind]
    assert isinstance(options.label, str)
    assert options.hooks <= {"embed", "rotate", "bias", "contextual"}
    model = make_model(cfg)
    enc = model.position
    assert isinstance(enc, PositionEncoding)
    pos = jnp.arange(6, dtype=jnp.int32) + 3
    q = k = jax.random.normal(jax.random.PRNGKey(0), (6, cfg.model.n_heads, cfg.model.d_head))
    rq, rk = enc.rotate(q, k, pos)
    assert ("rotate" in options.hooks) == (not np.array_equal(rq, q))
    assert ("rotate" in options.hooks) == (not np.array_equal(rk, k))
    assert ("embed" in options.hooks) == (enc.embed(pos) is not None)
    bias = enc.bias(pos[2:5], pos)
    assert ("bias" in options.hooks) == (bias is not None)
    if bias is not None:
        assert bias.shape == (cfg.model.n_heads, 3, 6)
    logits = jax.random.normal(jax.random.PRNGKey(1), (cfg.model.n_heads, 3, 6))
    visible = jnp.arange(6)[None, :] <= jnp.arange(2, 5)[:, None]
    term = enc.contextual_bias(q[2:5].transpose(1, 0, 2), logits, visible)
    assert ("contextual" in options.hooks) == (term is not None)
    if term is not None:
        assert term.shape == (cfg.model.n_heads, 3, 6)
    nope = make_model(tiny_trial("none"))
    added = count_params(model) - count_params(nope)
    assert options.n_params(cfg.model, max_length=cfg.max_length) == added
    assert options.supports_scaling == ("rotate" in options.hooks)


@pytest.mark.parametrize("kind", KINDS)
def test_scaling_changes_only_encodings_that_support_it(kind):
    from rope_lab.model.transformer import with_scaling

    model = make_model(tiny_trial(kind))
    scaled = with_scaling(model, "linear", 4.0)
    same = eqx.tree_equal(eqx.filter(model, eqx.is_array), eqx.filter(scaled, eqx.is_array))
    assert bool(same) == (not model.config.position.options.supports_scaling)


@pytest.mark.parametrize("kind", [k for k in KINDS if not POSITIONS[k].takes_positions])
def test_randomising_positions_needs_an_encoding_that_reads_them(kind):
    cfg = replace(
        tiny_trial(kind),
        **{"model.position.randomized": True, "model.position.random_max_length": 64},
    )
    with pytest.raises(Exception, match="randomized: needs an encoding that takes positions"):
        validate(cfg)

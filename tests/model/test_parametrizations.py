"""What each parametrisation sets: at width == base_width muP is SP exactly (init, forward
multipliers, attention scale, per-layer learning rates); off it, muP's width laws."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import replace
from rope_lab.model.attention_layer import attention_scale
from rope_lab.model.layers import Linear
from rope_lab.trial.optimizer import lr_multipliers
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

is_linear = lambda x: isinstance(x, Linear)


def _model(param, width, base_width, **model):
    changes = {"model.parametrization": param, "model.base_width": base_width}
    changes |= {f"model.{k}": v for k, v in model.items()}
    return make_model(replace(tiny_trial("rope", width=width, depth=2, head_dim=8), **changes))


def _multipliers(model):
    return [x.multiplier for x in jax.tree.leaves(model, is_leaf=is_linear) if is_linear(x)]


@pytest.mark.parametrize("model_fields", [{}, {"heads": 2, "head_dim": None}])
def test_mup_at_base_width_is_sp(model_fields):
    """Same key, width 32 = base_width: every parameter, every Linear's forward multiplier, the
    attention logit scale, every Adam learning-rate multiplier and the logits coincide."""
    sp, mup = (_model(p, 32, 32, **model_fields) for p in ("sp", "mup"))
    for a, b in zip(jax.tree.leaves(sp), jax.tree.leaves(mup), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _multipliers(mup) == _multipliers(sp) == [1.0] * len(_multipliers(sp))
    assert mup.blocks.attn.scale == sp.blocks.attn.scale == 1 / math.sqrt(mup.config.d_head)
    assert jax.tree.leaves(lr_multipliers(mup)) == jax.tree.leaves(lr_multipliers(sp))
    assert set(jax.tree.leaves(lr_multipliers(mup))) == {1.0}
    tokens = jnp.arange(12) % 24
    np.testing.assert_array_equal(np.asarray(mup(tokens)), np.asarray(sp(tokens)))


def test_mup_width_laws_off_base():
    """Width 128, base 32: readout init std sqrt(32)/128 (var base/fan_in^2), hidden std
    1/sqrt(fan_in) as SP, hidden and readout lr x 1/4, embeddings and norms lr x 1."""
    mup = _model("mup", 128, 32)
    assert float(jnp.std(mup.head.weight)) == pytest.approx(math.sqrt(32) / 128, rel=0.03)
    assert float(jnp.std(mup.blocks.attn.q.weight)) == pytest.approx(128**-0.5, rel=0.03)
    mults = lr_multipliers(mup)
    assert mults.head.weight == mults.blocks.mlp.up.weight == mults.blocks.attn.o.weight == 0.25
    assert mults.embedding == mults.final_norm.weight == mults.blocks.attn_norm.weight == 1.0


@pytest.mark.parametrize(
    ("width", "heads", "head_dim", "expected"),
    [
        (128, None, 8, 1 / math.sqrt(8)),  # heads grow at fixed head_dim: SP's scale
        (128, 2, None, math.sqrt(16) / 64),  # d 64, d_base = 32 / 2 = 16: 1/d law
        (32, 2, None, 1 / math.sqrt(16)),  # at the base width: SP's
    ],
)
def test_mup_attention_scale(width, heads, head_dim, expected):
    cfg = replace(
        tiny_trial("rope", width=width, head_dim=8),
        **{
            "model.parametrization": "mup",
            "model.base_width": 32,
            "model.heads": heads,
            "model.head_dim": head_dim,
        },
    ).model
    assert attention_scale(cfg) == pytest.approx(expected, rel=1e-12)


def test_ntk_keeps_its_own_init():
    """NTK: every Linear N(0, 1) (SP's draw times sqrt(fan_in)) with forward multiplier
    1/sqrt(fan_in); SP's learning rates."""
    ntk, sp = _model("ntk", 32, 32), _model("sp", 32, 32)
    assert ntk.blocks.attn.q.multiplier == ntk.head.multiplier == 32**-0.5
    assert ntk.blocks.mlp.down.multiplier == 128**-0.5
    np.testing.assert_allclose(ntk.head.weight, sp.head.weight * 32**0.5, rtol=1e-6)
    assert set(jax.tree.leaves(lr_multipliers(ntk))) == {1.0}

"""The objective: per-token cross-entropy and the masked mean, on known logits."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.tasks import Batch
from rope_lab.trial.objective import masked_loss, token_losses

VOCAB = 4


def _fixed(logits):
    """A stand-in model returning `logits` (B, L, V) whatever its input."""
    return lambda tokens, positions: logits


def _batch(targets, mask):
    targets = jnp.asarray(targets, jnp.int32)
    return Batch(tokens=jnp.zeros_like(targets), targets=targets, mask=jnp.asarray(mask))


def test_token_losses_of_one_hot_logits():
    # position 0 puts logit 2 on token 1, position 1 on token 3; targets 1 and 0
    logits = jnp.zeros((1, 2, VOCAB)).at[0, 0, 1].set(2.0).at[0, 1, 3].set(2.0)
    batch = _batch([[1, 0]], [[True, True]])
    losses, correct = token_losses(_fixed(logits), batch, jnp.arange(2))
    z = math.log(math.exp(2.0) + VOCAB - 1)
    np.testing.assert_allclose(np.asarray(losses), [[z - 2.0, z]], rtol=1e-6)
    assert np.asarray(correct).tolist() == [[True, False]]


def test_masked_loss_averages_scored_positions_only():
    logits = jnp.zeros((2, 3, VOCAB)).at[:, :, 0].set(jnp.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]))
    batch = _batch([[0, 0, 0], [0, 0, 0]], [[False, True, False], [False, False, True]])
    losses, _ = token_losses(_fixed(logits), batch, jnp.arange(3))
    want = (float(losses[0, 1]) + float(losses[1, 2])) / 2
    assert float(masked_loss(_fixed(logits), batch, jnp.arange(3))) == pytest.approx(want)
    uniform = _fixed(jnp.zeros((2, 3, VOCAB)))
    assert float(masked_loss(uniform, batch, jnp.arange(3))) == pytest.approx(math.log(VOCAB))


def test_masked_loss_without_scored_positions_is_zero():
    batch = _batch([[1, 2]], [[False, False]])
    assert float(masked_loss(_fixed(jnp.zeros((1, 2, VOCAB))), batch, jnp.arange(2))) == 0.0

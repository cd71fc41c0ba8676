"""Memory estimates against XLA's own, and the evaluation batch split they drive."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.config import ModelConfig, PositionConfig, replace
from rope_lab.model import memory
from rope_lab.model.memory import causal_blocks, forward_bytes, sequences_per_forward
from rope_lab.model.transformer import Transformer
from rope_lab.registry import POSITIONS
from rope_lab.tasks import Batch, task_from_config
from rope_lab.trial.evaluate import evaluate_length
from rope_lab.trial.objective import token_losses
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial


def xla_temp_bytes_per_sequence(model_cfg: ModelConfig, vocab: int, length: int) -> float:
    """XLA's temporary-buffer estimate of the evaluation forward (losses) of 2 sequences, / 2."""
    model = Transformer(
        model_cfg, vocab, train_length=length, max_length=length, key=jax.random.PRNGKey(0)
    )
    arrays, static = eqx.partition(model, eqx.is_array)
    tokens = jnp.zeros((2, length), jnp.int32)

    def sums(arrays, tokens):
        batch = Batch(tokens, tokens, jnp.ones(tokens.shape, bool))
        positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
        losses, correct = token_losses(eqx.combine(arrays, static), batch, positions)
        return losses.sum(0), correct.sum(0)

    compiled = jax.jit(sums).lower(arrays, tokens).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2


@pytest.mark.parametrize(
    ("width", "length", "vocab", "kind", "attention"),
    [
        (128, 1024, 256, "rope", "auto"),
        (128, 4096, 256, "alibi", "blocked"),
        pytest.param(256, 2048, 32, "rope", "reference", marks=pytest.mark.slow),
        pytest.param(64, 4096, 256, "fire", "blocked", marks=pytest.mark.slow),
        (64, 1536, 512, "kerple_log", "auto"),
    ],
)
def test_forward_bytes_bounds_xla_within_a_small_factor(width, length, vocab, kind, attention):
    cfg = ModelConfig(width=width, depth=2, position=PositionConfig(kind=kind), attention=attention)
    cfg = replace(tiny_trial(kind), model=cfg).model  # the encoding's default options
    xla = xla_temp_bytes_per_sequence(cfg, vocab, length)
    bound = forward_bytes(cfg, vocab, length)
    assert xla <= bound <= 2.5 * xla, (xla / 2**20, bound / 2**20)


@given(length=st.integers(1, 2000))
def test_causal_blocks_tile_the_sequence(length):
    blocks = causal_blocks(length)
    assert blocks[0][0] == 0 and blocks[-1][1] == length
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(blocks))
    assert 1 <= len(blocks) <= memory.MAX_ATTENTION_BLOCKS
    if len(blocks) > 1:
        assert min(stop - start for start, stop in blocks) >= memory.ATTENTION_BLOCK // 2
        assert max(stop - start for start, stop in blocks) >= memory.ATTENTION_BLOCK


def test_attention_pairs_grow_quadratically_for_reference_and_not_for_blocked():
    assert memory.attention_pairs(1024, "reference") == 128 * 1024
    assert memory.attention_pairs(32768, "blocked") == memory.BLOCK**2
    assert memory.attention_pairs(32768, "auto") == memory.BLOCK**2
    assert memory.attention_pairs(2048, "auto") == memory.attention_pairs(2048, "reference")


@given(batch=st.integers(1, 24), budget_sequences=st.floats(0.1, 30.0))
def test_sequences_per_forward_is_the_largest_divisor_that_fits(batch, budget_sequences):
    cfg = tiny_trial()
    per_sequence = forward_bytes(cfg.model, 24, 64)
    budget_mb = budget_sequences * per_sequence / 2**20
    cfg = replace(cfg, **{"eval.batch_size": batch, "eval.memory_budget_mb": budget_mb})
    chunk = sequences_per_forward(cfg, 64)
    assert batch % chunk == 0
    assert chunk == 1 or chunk * per_sequence <= budget_mb * 2**20
    bigger = [b for b in range(chunk + 1, batch + 1) if batch % b == 0]
    assert all(b * per_sequence > budget_mb * 2**20 for b in bigger)


@pytest.mark.parametrize("pad", [False, True])
def test_a_batch_split_by_the_memory_budget_gives_the_same_numbers(pad):
    cfg = replace(tiny_trial("alibi"), **{"eval.batch_size": 6, "eval.pad_to_longest": pad})
    model, task = make_model(cfg), task_from_config(cfg.task)
    tight = replace(cfg, **{"eval.memory_budget_mb": 1e-3})
    whole = evaluate_length(model, task, cfg, 32, key=jax.random.PRNGKey(5))
    split = evaluate_length(model, task, tight, 32, key=jax.random.PRNGKey(5))
    assert (whole["sequences_per_forward"], split["sequences_per_forward"]) == (6, 1)
    for name in ("loss_sum", "correct", "count"):
        np.testing.assert_allclose(split[name], whole[name], rtol=1e-5)
    assert split["exact_match"] == whole["exact_match"]
    assert whole["count"].sum() > 0


def test_fire_counts_its_mlp_activations_per_pair():
    cfg = tiny_trial("fire").model
    options = POSITIONS["fire"]()
    assert options.bias_floats_per_pair(cfg) == options.hidden + cfg.n_heads
    assert POSITIONS["rope"]().bias_floats_per_pair(cfg) == 0
    assert POSITIONS["alibi"]().bias_floats_per_pair(cfg) == cfg.n_heads

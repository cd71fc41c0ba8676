"""Memory estimates against XLA's own, and the evaluation batch split they drive."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.config import ModelConfig, PositionConfig, TrialConfig, replace
from rope_lab.model import memory
from rope_lab.model.memory import (
    causal_blocks,
    forward_bytes,
    sequences_per_forward,
    train_step_bytes,
)
from rope_lab.model.transformer import Transformer, with_scaling
from rope_lab.registry import POSITIONS
from rope_lab.tasks import Batch, task_from_config
from rope_lab.trial.evaluate import evaluate_length
from rope_lab.trial.objective import token_losses
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial


def xla_temp_bytes_per_sequence(
    model_cfg: ModelConfig, vocab: int, length: int, remap: str | None = None
) -> float:
    """XLA's temporary-buffer estimate of the evaluation forward (losses) of 2 sequences, / 2,
    under a relative-position `remap` at factor 4 when given."""
    model = Transformer(
        model_cfg, vocab, train_length=length, max_length=length, key=jax.random.PRNGKey(0)
    )
    if remap is not None:
        model = with_scaling(model, remap, 4.0)
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


@pytest.mark.parametrize(
    ("length", "attention", "remap", "sets"),
    [
        (1024, "auto", "dual_chunk", 3),
        pytest.param(4096, "blocked", "rerope", 2, marks=pytest.mark.slow),
    ],
)
def test_forward_bytes_bounds_xla_under_a_remap(length, attention, remap, sets):
    """A remap's S position sets (S rotated queries and keys, S logits per pair) are counted:
    the bound with `sets` holds XLA's estimate within the same factor, and exceeds the bound
    without them."""
    cfg = ModelConfig(width=128, depth=2, position=PositionConfig(kind="rope"), attention=attention)
    xla = xla_temp_bytes_per_sequence(cfg, 256, length, remap)
    bound = forward_bytes(cfg, 256, length, sets)
    assert xla <= bound <= 2.5 * xla, (xla / 2**20, bound / 2**20)
    assert forward_bytes(cfg, 256, length) < bound


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


def test_a_remap_stage_splits_its_batch_by_its_own_memory():
    """Evaluation sizes a remap stage's sub-batches with its position sets: at a budget of
    exactly 4 plain sequences, the as-trained rows run 4 at once, Dual Chunk Attention's fewer
    (what `sequences_per_forward(..., sets=3)` allows; a split leaves the numbers as they are,
    `test_a_batch_split_by_the_memory_budget_gives_the_same_numbers`)."""
    from rope_lab.trial.evaluate import evaluate_model
    from rope_lab.trial.scaling_plan import Scaling

    changes = {"eval.batch_size": 4, "eval.batches": 1, "eval.length_multipliers": (2,)}
    cfg = replace(tiny_trial("rope"), **changes)
    length = cfg.eval_lengths[0]
    plain = forward_bytes(cfg.model, cfg.task.vocab_size, length)
    tight = replace(cfg, **{"eval.memory_budget_mb": 4 * plain / 2**20})
    assert sequences_per_forward(tight, length, 3) < 4 == sequences_per_forward(tight, length)
    model, task = make_model(cfg), task_from_config(cfg.task)
    scalings = [Scaling("default", 1.0), Scaling("dual_chunk", 4.0)]
    rows = evaluate_model(model, task, tight, step=0, scalings=scalings)
    whole = [r["sequences_per_forward"] for r in rows if r["position_bucket"] is None]
    assert whole == [4, sequences_per_forward(tight, length, 3)]


def xla_train_step_bytes(cfg: TrialConfig) -> tuple[int, int]:
    """XLA's estimate of the compiled train step (arguments + temporaries) and the trainable
    parameter count."""
    from rope_lab.model.transformer import count_params, trainable
    from rope_lab.trial.optimizer import make_optimizer
    from rope_lab.trial.train import TraceGuard, init_state, make_train_step

    model, opt_state = init_state(cfg)
    task = task_from_config(cfg.task)
    params, static = eqx.partition(model, trainable(model))
    optimizer = make_optimizer(cfg.train, model)
    step = make_train_step(
        cfg, task, optimizer, length=cfg.train.length, guard=TraceGuard("memory")
    )
    lowered = step.lower(static, params, opt_state, jax.random.PRNGKey(0), task.operands("train"))
    analysis = lowered.compile().compiled.memory_analysis()
    return analysis.argument_size_in_bytes + analysis.temp_size_in_bytes, count_params(model)


@pytest.mark.parametrize(
    ("kind", "width", "length", "batch", "attention", "remat"),
    [
        ("rope", 128, 512, 2, "auto", "none"),
        ("rope", 512, 32, 1, "auto", "none"),  # parameters and optimiser state dominate
        ("rope", 128, 512, 2, "blocked", "attention"),
        pytest.param("rope", 128, 1024, 1, "blocked", "block", marks=pytest.mark.slow),
        pytest.param("alibi", 64, 1024, 1, "blocked", "attention", marks=pytest.mark.slow),
        pytest.param("fire", 64, 1024, 1, "blocked", "none", marks=pytest.mark.slow),
        pytest.param("rope", 128, 4096, 1, "blocked", "none", marks=pytest.mark.slow),
        pytest.param("cope", 64, 512, 1, "auto", "none", marks=pytest.mark.slow),
        pytest.param("alibi", 128, 1024, 2, "reference", "none", marks=pytest.mark.slow),
        pytest.param("t5_bias", 64, 1024, 1, "auto", "none", marks=pytest.mark.slow),
    ],
)
def test_train_step_bytes_bound_xla_within_a_small_factor(
    kind, width, length, batch, attention, remat
):
    """The train step's bound (parameters, gradients, Adam moments, what the backward keeps)
    lies within 1-2.5x above XLA's estimate of the compiled step, reference path (every causal
    block's weights saved) and blocked kernel (a tile's bias worked on at once) alike, and under
    rematerialisation (`train.remat`: what each policy keeps, `remat_kept_floats`)."""
    cfg = tiny_trial(kind, width=width, depth=2, head_dim=32, length=length, vocab=256)
    changes = {"train.batch_size": batch, "model.attention": attention, "train.remat": remat}
    cfg = replace(cfg, **changes)
    xla, n_params = xla_train_step_bytes(cfg)
    bound = train_step_bytes(cfg.model, 256, length, batch, n_params, remat=remat)
    assert xla <= bound <= 2.5 * xla, (xla / 2**20, bound / 2**20)

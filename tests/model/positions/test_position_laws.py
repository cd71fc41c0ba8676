"""The law that defines each position encoding, checked on the whole model.

Attention logits are the first layer's unmasked pre-softmax logits (`attention_logits`); each
expected value is computed independently in NumPy, with float32 rounding bounds derived from
the operations the model performs.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rope_lab.config import replace
from rope_lab.model.positions import alibi_slopes, make_position_encoding
from rope_lab.model.positions.modules import SinusoidalPE, with_rope_scaling
from rope_lab.model.transformer import trainable, with_scaling
from rope_lab.registry import POSITIONS
from rope_lab.trial.evaluate import evaluate_length
from rope_lab.trial.optimizer import make_optimizer
from rope_lab.trial.train import (
    batch_positions,
    make_model,
    make_task_from,
    masked_loss,
    train,
    train_step_body,
)
from tests.helpers import tiny_trial

EPS = float(np.finfo(np.float32).eps)
L = 12  # sequence length of the logit checks
VOCAB = 24

logits_of = eqx.filter_jit(
    lambda model, tokens, positions: model.attention_logits(tokens, positions)
)
forward = eqx.filter_jit(lambda model, tokens, positions: model(tokens, positions))


def tokens_for(seed: int) -> jax.Array:
    """A random token sequence of length L."""
    return jax.random.randint(jax.random.PRNGKey(seed), (L,), 0, VOCAB)


def logits(model, tokens, positions) -> np.ndarray:
    """First-layer attention logits (H, L, L) as float64 NumPy (exact copy of the float32)."""
    return np.asarray(logits_of(model, tokens, jnp.asarray(positions, jnp.int32)), np.float64)


def increasing_positions(offset: int, gaps: list[int]) -> np.ndarray:
    """Strictly increasing positions offset, offset + gaps[0], ... (L of them)."""
    return offset + np.concatenate([[0], np.cumsum(gaps)]).astype(np.int64)


GAPS = st.lists(st.integers(1, 5), min_size=L - 1, max_size=L - 1)


def qk_bound(model, tokens) -> np.ndarray:
    """scale * |q_i| |k_j| per head (H, L, L) of the first layer's projections before any
    rotation: bounds |logit(i, j)| / attention_factor^2 by Cauchy-Schwarz."""
    first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, model.blocks)
    h = first.attn_norm(model.embed(tokens, jnp.arange(L)))
    heads = first.attn.heads
    q = np.asarray(first.attn.q(h), np.float64).reshape(L, heads, -1)
    k = np.asarray(first.attn.k(h), np.float64).reshape(L, heads, -1)
    qn, kn = np.linalg.norm(q, axis=-1).T, np.linalg.norm(k, axis=-1).T  # (H, L)
    return first.attn.scale * qn[:, :, None] * kn[:, None, :]


def with_encoding(model, encoding):
    """The same weights with another position encoding."""
    return eqx.tree_at(lambda m: m.position, model, encoding)


# --------------------------------------------------------------------------------------------
# ALiBi
# --------------------------------------------------------------------------------------------


def press_slopes(n: int) -> list[float]:
    """ALiBi head slopes as Press et al. (2022) define them: 2^(-8h/n), h = 1..n, for n a power
    of two; otherwise the slopes of the closest lower power of two m, then every other slope of
    the 2m sequence, the first n - m of them."""
    m = 2 ** (n.bit_length() - 1)
    if m == n:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
    return press_slopes(m) + press_slopes(2 * m)[0::2][: n - m]


@functools.cache
def alibi_model(heads: int):
    """A one-layer ALiBi model with `heads` heads of dimension 4: make_model's structure and
    encoding, with N(0, 1/4) weights drawn in NumPy (no per-shape init programs to compile)."""
    cfg = tiny_trial("alibi", width=4 * heads, head_dim=4)
    skeleton = eqx.filter_eval_shape(make_model, cfg)
    rng = np.random.default_rng(heads)
    model = jax.tree.map(lambda s: jnp.asarray(rng.normal(0.0, 0.5, s.shape), s.dtype), skeleton)
    encoding = make_position_encoding(
        cfg.model, max_length=cfg.max_length, train_length=cfg.train.length, key=None
    )
    return with_encoding(model, encoding)


@pytest.mark.parametrize("heads", range(1, 17))
def test_alibi_slopes_match_press_et_al(heads):
    expected = np.asarray(press_slopes(heads))
    np.testing.assert_allclose(alibi_slopes(heads), expected, rtol=1e-14, atol=0)
    assert np.all(expected > 0) and len(set(expected)) == heads
    cfg = tiny_trial("alibi", width=4 * heads, head_dim=4).model
    buffer = make_position_encoding(cfg, max_length=1, train_length=1, key=None).slopes.value
    np.testing.assert_array_equal(np.asarray(buffer), expected.astype(np.float32))


@pytest.mark.parametrize("heads", range(1, 13))
@settings(max_examples=6)
@given(offset=st.integers(0, 10**6), gaps=GAPS, seed=st.integers(0, 2**16))
@example(offset=0, gaps=[1] * (L - 1), seed=0)
def test_alibi_logits_are_content_minus_slope_times_distance(heads, offset, gaps, seed):
    """logit(i, j) = content(i, j) - slope_h (p_i - p_j) for every head, at any offset."""
    model = alibi_model(heads)
    tokens = tokens_for(seed)
    positions = increasing_positions(offset, gaps)
    full = logits(model, tokens, positions)
    # Zero slopes remove the bias and keep the compiled program.
    bare = logits(
        eqx.tree_at(lambda m: m.position.slopes.value, model, replace_fn=jnp.zeros_like),
        tokens,
        positions,
    )
    slopes = np.asarray(press_slopes(heads))
    distance = (positions[:, None] - positions[None, :]).astype(np.float64)
    bias = -slopes[:, None, None] * distance[None]
    # full = fl32(bare + fl32(bias)): within an ulp of each.
    tol = 2 * EPS * (np.abs(bias) + np.abs(full) + np.abs(bare))
    assert np.all(np.abs((full - bare) - bias) <= tol), np.max(np.abs(full - bare - bias) / tol)

    # Without query weights the logits are the bias alone, bit for bit in float32.
    blind = logits(
        eqx.tree_at(lambda m: m.blocks.attn.q.weight, model, replace_fn=jnp.zeros_like),
        tokens,
        positions,
    )
    exact = -(slopes.astype(np.float32)[:, None, None] * distance.astype(np.float32)[None])
    np.testing.assert_array_equal(blind, exact)
    # For a fixed query, a farther (earlier) key always gets a strictly lower logit.
    earlier = np.tri(L, L - 1, k=-1, dtype=bool)  # (i, j) with j + 1 <= i
    assert np.all(np.diff(blind, axis=-1)[:, earlier] > 0)

    # The distances are exact in float32, so an offset changes no logit at all.
    np.testing.assert_array_equal(logits(model, tokens, positions - offset), full)


# --------------------------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------------------------

ROPE = make_model(tiny_trial("rope"))  # 4 heads of dimension 8, all rotated
SINUSOIDAL = make_model(tiny_trial("sinusoidal"))
ROPE_SCALINGS = [("default", 1.0), ("linear", 2.0), ("yarn", 4.0)]


def rope_shift_tolerance(model, tokens, base: np.ndarray, shifted: np.ndarray) -> np.ndarray:
    """Float32 rounding bound (H, L, L) on |logits(shifted) - logits(base)| for a RoPE model.

    The angle fl(p w) is off by at most eps/2 p w <= eps/2 p (w <= 1); with cos/sin and the
    rotation (~2 eps) and the head-dim dot product (d eps), each logit is within
    eps (p_max + d + 4) a^2 scale |q_i| |k_j| of its exact value, for each position set."""
    d = model.config.d_head
    a = float(model.position.attention_factor.value)
    budget = int(base.max()) + int(shifted.max()) + 2 * (d + 4)
    return EPS * budget * a**2 * qk_bound(model, tokens)


@given(
    tau=st.integers(0, 10**4),
    scaling=st.sampled_from(ROPE_SCALINGS),
    gaps=GAPS,
    seed=st.integers(0, 2**16),
)
@example(tau=10**4, scaling=("yarn", 4.0), gaps=[1] * (L - 1), seed=0)
@example(tau=1, scaling=("default", 1.0), gaps=[1] * (L - 1), seed=1)
def test_rope_logits_depend_only_on_relative_position(tau, scaling, gaps, seed):
    model = with_scaling(ROPE, *scaling, seq_len=ROPE.train_length)
    tokens = tokens_for(seed)
    positions = increasing_positions(0, gaps)
    base = logits(model, tokens, positions)
    shifted = logits(model, tokens, positions + tau)
    tol = rope_shift_tolerance(model, tokens, positions, positions + tau)
    assert np.all(np.abs(shifted - base) <= tol), np.max(np.abs(shifted - base) / tol)


@pytest.mark.parametrize("kind", [k for k in POSITIONS.names() if "embed" in POSITIONS[k].hooks])
def test_absolute_encodings_are_not_shift_invariant(kind):
    """The same check on an absolute encoding (one that adds a position embedding to the input)
    fails by orders of magnitude."""
    model = SINUSOIDAL if kind == "sinusoidal" else make_model(tiny_trial(kind))
    tokens = tokens_for(0)
    positions = np.arange(L)
    base, shifted = logits(model, tokens, positions), logits(model, tokens, positions + 5)
    tol = rope_shift_tolerance(ROPE, tokens, positions, positions + 5)
    assert np.max(np.abs(shifted - base) / tol) > 1e3


@given(a=st.floats(0.25, 4.0), offset=st.integers(0, 10**4), seed=st.integers(0, 2**16))
@example(a=2.0, offset=0, seed=0)
def test_rope_attention_factor_scales_logits_by_its_square(a, offset, seed):
    """Both queries and keys carry the factor a, so the logits are a^2 times those at a = 1."""
    inv = ROPE.position.inv_freq.value
    unit = with_encoding(ROPE, with_rope_scaling(ROPE.position, inv, 1.0))
    scaled = with_encoding(ROPE, with_rope_scaling(ROPE.position, inv, a))
    tokens = tokens_for(seed)
    positions = np.arange(L) + offset
    expected = a**2 * logits(unit, tokens, positions)
    tol = EPS * (ROPE.config.d_head + 8) * a**2 * qk_bound(ROPE, tokens)
    got = logits(scaled, tokens, positions)
    assert np.all(np.abs(got - expected) <= tol), np.max(np.abs(got - expected) / tol)


def test_yarn_attention_factor_scales_logits_by_its_square():
    """YaRN at s = 16: a = 0.1 ln s + 1 (Peng et al. 2023), and the logits are a^2 times those
    of the same frequencies with a = 1."""
    yarn = with_scaling(ROPE, "yarn", 16.0, seq_len=16 * ROPE.train_length)
    a = float(yarn.position.attention_factor.value)
    assert a == pytest.approx(0.1 * math.log(16.0) + 1.0, rel=1e-6)
    unit = with_encoding(yarn, with_rope_scaling(yarn.position, yarn.position.inv_freq.value, 1.0))
    tokens = tokens_for(3)
    positions = np.arange(L) + 100
    expected = a**2 * logits(unit, tokens, positions)
    tol = EPS * (ROPE.config.d_head + 8) * a**2 * qk_bound(ROPE, tokens)
    got = logits(yarn, tokens, positions)
    assert np.all(np.abs(got - expected) <= tol)
    assert np.max(np.abs(got - expected / a)) > 1e3 * np.max(tol)  # a, not a^2, is far off


# --------------------------------------------------------------------------------------------
# NoPE
# --------------------------------------------------------------------------------------------

NOPE = make_model(tiny_trial("none"))


@given(
    positions=st.lists(st.integers(0, 10**6), min_size=L, max_size=L), seed=st.integers(0, 2**16)
)
def test_nope_ignores_positions(positions, seed):
    """Any positions (unsorted, repeated, huge) give bit-identical logits and outputs."""
    tokens = tokens_for(seed)
    positions = jnp.asarray(positions, jnp.int32)
    default = jnp.arange(L, dtype=jnp.int32)
    np.testing.assert_array_equal(logits(NOPE, tokens, positions), logits(NOPE, tokens, default))
    np.testing.assert_array_equal(
        np.asarray(forward(NOPE, tokens, positions)), np.asarray(forward(NOPE, tokens, default))
    )


# --------------------------------------------------------------------------------------------
# Learned absolute
# --------------------------------------------------------------------------------------------


def test_learned_rows_past_train_length_keep_their_init():
    """Training at L_train = 16 with weight decay moves every row < 16 of the position table and
    leaves every row >= 16 bit-identical to its initial value."""
    cfg = tiny_trial(
        "learned", task="lm_synthetic", task_params=(), length=16, steps=4, weight_decay=0.5
    )
    assert cfg.max_length == 32  # the longest evaluated length, 2 x L_train
    init = np.asarray(make_model(cfg).position.table)
    assert init.shape == (32, cfg.model.width)
    trained = np.asarray(train(cfg).model.position.table)
    np.testing.assert_array_equal(trained[16:], init[16:])
    assert np.all(np.any(trained[:16] != init[:16], axis=1))


# --------------------------------------------------------------------------------------------
# Randomised positions
# --------------------------------------------------------------------------------------------

RANDOM_MAX = 48


def randomized(kind: str, **changes):
    """A tiny language-modelling trial with positions drawn from [0, RANDOM_MAX)."""
    cfg = tiny_trial(kind, task="lm_synthetic", task_params=(), length=16)
    return replace(
        cfg,
        **{
            "model.position.randomized": True,
            "model.position.random_max_length": RANDOM_MAX,
            "eval.batch_size": cfg.train.batch_size,
            **changes,
        },
    )


@settings(max_examples=10)
@given(length=st.sampled_from([1, 7, 16, 40, RANDOM_MAX, 60]), seed=st.integers(0, 2**16))
def test_randomized_positions_are_sorted_distinct_and_in_range(length, seed):
    """Each row is a sorted subset of [0, max(random_max_length, L)): all of it when L >= the
    bound; rows of one batch are drawn independently."""
    cfg = randomized("rope")
    pos = np.asarray(batch_positions(cfg, 8, length, key=jax.random.PRNGKey(seed)))
    bound = max(RANDOM_MAX, length)
    assert pos.shape == (8, length) and pos.dtype == np.int32
    assert np.all(np.diff(pos, axis=1) > 0)
    assert pos.min() >= 0 and pos.max() < bound
    if length == bound:
        np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(length), pos.shape))
    elif length > 1:
        assert len({tuple(row) for row in pos}) > 1


def test_randomized_positions_are_uniform_subsets():
    """Every position of [0, M) is in a drawn subset of size L with probability L / M."""
    draws, length = 4096, 8
    pos = np.asarray(batch_positions(randomized("rope"), draws, length, key=jax.random.PRNGKey(7)))
    freq = np.bincount(pos.ravel(), minlength=RANDOM_MAX) / draws
    p = length / RANDOM_MAX
    assert np.max(np.abs(freq - p)) < 6 * math.sqrt(p * (1 - p) / draws)  # 6 sigma


@eqx.filter_jit
def reference_losses(model, task, operands, cfg, key):
    """The loss of the (B, L_train) batch drawn from split(key)[0] at the positions
    `batch_positions` draws from split(key)[1], the loss at 0..L-1, and the largest position."""
    data_key, pos_key = jax.random.split(key)
    size, length = cfg.train.batch_size, cfg.train.length
    batch = task.sample_from(operands, size, length, key=data_key)
    positions = batch_positions(cfg, size, length, key=pos_key)
    fixed = jnp.broadcast_to(jnp.arange(length), positions.shape)
    return masked_loss(model, batch, positions), masked_loss(model, batch, fixed), positions.max()


@pytest.mark.slow
def test_training_and_evaluation_draw_the_same_positions():
    """For one key, a train step and an evaluation batch see the batch and positions that
    `batch_positions` draws from split(key)[1]; fixed positions would give another loss."""
    cfg = randomized("learned", **{"eval.batches": 1})
    model, task = make_model(cfg), make_task_from(cfg)
    operands = task.operands()
    eval_key = jax.random.PRNGKey(5)
    key = jax.random.fold_in(eval_key, 0)  # evaluation's key of batch 0
    expected, fixed, largest = map(float, reference_losses(model, task, operands, cfg, key))
    assert largest >= cfg.train.length  # beyond 0..L-1
    assert abs(fixed - expected) > 1e-3 * expected

    params, static = eqx.partition(model, trainable(model))
    optimizer = make_optimizer(cfg.train, model)
    step = eqx.filter_jit(train_step_body(cfg, task, optimizer, length=cfg.train.length))
    _, _, metrics = step(static, params, optimizer.init(params), key, operands)
    assert float(metrics["loss"]) == pytest.approx(expected, rel=1e-5)

    sums = evaluate_length(model, task, cfg, cfg.train.length, key=eval_key)
    loss = sums["loss_sum"].sum() / sums["count"].sum()
    assert loss == pytest.approx(expected, rel=1e-5)


# --------------------------------------------------------------------------------------------
# Sinusoidal
# --------------------------------------------------------------------------------------------


def vaswani(positions: np.ndarray, width: int, base: float = 10000.0) -> np.ndarray:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)) (Vaswani et al.
    2017), in float64, truncated to d = width dimensions."""
    pe = np.empty((len(positions), width))
    for dim in range(width):
        angle = positions / base ** (2 * (dim // 2) / width)
        pe[:, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
    return pe


def sinusoid_tolerance(positions: np.ndarray, width: int) -> np.ndarray:
    """Float32 bound (L, width): the angle p w (w <= 1) is off by ~2 eps p, sin/cos by eps."""
    return np.broadcast_to(4 * EPS * (positions[:, None] + 1.0), (len(positions), width))


@given(
    positions=st.lists(st.integers(0, 10**4), min_size=L, max_size=L), seed=st.integers(0, 2**16)
)
@example(positions=list(range(L)), seed=0)
def test_sinusoidal_embedding_is_the_vaswani_closed_form(positions, seed):
    """The model's input embedding minus the token embedding is the interleaved sin/cos table."""
    tokens = tokens_for(seed)
    positions = np.asarray(positions)
    x = np.asarray(SINUSOIDAL.embed(tokens, jnp.asarray(positions, jnp.int32)), np.float64)
    pe = x - np.asarray(SINUSOIDAL.embedding[tokens], np.float64)
    tol = sinusoid_tolerance(positions, 32) + EPS * np.abs(x)
    expected = vaswani(positions, 32)
    assert np.all(np.abs(pe - expected) <= tol), np.max(np.abs(pe - expected) / tol)


@pytest.mark.parametrize("width", [1, 7])
def test_sinusoidal_closed_form_at_any_width(width):
    positions = np.array([0, 1, 2, 5, 63, 1000, 9999])
    pe = np.asarray(SinusoidalPE(width).embed(jnp.asarray(positions)), np.float64)
    np.testing.assert_array_less(
        np.abs(pe - vaswani(positions, width)), sinusoid_tolerance(positions, width) + 1e-30
    )
    batched = SinusoidalPE(width).embed(jnp.asarray(np.stack([positions, positions + 1])))
    np.testing.assert_array_equal(np.asarray(batched[0]), pe.astype(np.float32))

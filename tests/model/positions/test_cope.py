"""CoPE: logit term (1 - w) q_i . e[floor p_ij] + w q_i . e[ceil p_ij], w = p_ij - floor p_ij,
p_ij = min(sum_{t=j}^{i} sigmoid(s_it), npos_max - 1), s the attention logits (Golovneva et al.
2024, arXiv 2405.18719, section 3 and the appendix code).

Every expected value is an independent NumPy (float64) transcription of the paper's formula over
the whole causal (H, L, L) logits (gates, flipped cumulative sum, clamp, interpolation, softmax,
attention output), given the module's table.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rope_lab.config import (
    ConfigError,
    ModelConfig,
    PositionConfig,
    TrialConfig,
    from_dict,
    replace,
    to_dict,
    validate,
)
from rope_lab.model import attention
from rope_lab.model.attention import choose
from rope_lab.model.attention_logits import SOFTMAX
from rope_lab.model.memory import forward_bytes
from rope_lab.model.positions.cope import CopeConfig
from rope_lab.model.positions.modules import NoPE
from rope_lab.model.positions.modules.cope import CoPE, contextual_positions
from rope_lab.model.transformer import count_params
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.train import make_model, train
from tests.helpers import ntk_against_jacrev, tiny_trial

# the kernels under plain softmax; attention variants have their own tests (test_attention_fns)
attend = functools.partial(attention.attend, variant=SOFTMAX)
blocked_attention = functools.partial(attention.blocked_attention, variant=SOFTMAX)
reference_attention = functools.partial(attention.reference_attention, variant=SOFTMAX)

REFERENCE = eqx.filter_jit(reference_attention)


def encoding(table: np.ndarray) -> CoPE:
    """A CoPE module with its (npos_max, d_head) table set directly."""
    npos, dh = np.shape(table)
    return eqx.tree_at(lambda e: e.table, CoPE(npos, dh), jnp.asarray(table, jnp.float32))


def random_table(seed: int, npos: int, dh: int) -> np.ndarray:
    """(npos, dh) float32 normal draws."""
    return np.random.default_rng(seed).standard_normal((npos, dh)).astype(np.float32)


def visible_pairs(length: int, window: int | None = None) -> np.ndarray:
    """(L, L) bool: j <= i, and i - j < window."""
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    return (j <= i) if window is None else (j <= i) & (i - j < window)


def cope_positions(logits, visible, npos_max: int) -> np.ndarray:
    """(H, L, L) float64: p_ij = min(sum_{t=j}^{i} g_it, npos_max - 1), g = sigmoid(s) on visible
    pairs, 0 elsewhere (the paper's gates.flip(-1).cumsum(-1).flip(-1), then the clamp)."""
    gates = np.where(visible[None], 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64))), 0.0)
    counts = np.flip(np.cumsum(np.flip(gates, -1), -1), -1)
    return np.minimum(counts, npos_max - 1)


def cope_term(q, logits, table, visible) -> np.ndarray:
    """(H, L, L) float64: (1 - w) z[floor p] + w z[ceil p], z = q . e; 0 on pairs not visible."""
    table = np.asarray(table, np.float64)
    p = cope_positions(logits, visible, table.shape[0])
    z = np.einsum("hqd,pd->hqp", np.asarray(q, np.float64), table)  # (H, L, npos_max)
    low, high = np.floor(p).astype(int), np.ceil(p).astype(int)
    w = p - low
    term = (1 - w) * np.take_along_axis(z, low, -1) + w * np.take_along_axis(z, high, -1)
    return np.where(visible[None], term, 0.0)


def cope_attention(q, k, v, table, scale, window=None, row_scale=None) -> np.ndarray:
    """(H, L, Dh) float64: softmax(r_i (s_ij + term_ij)) over visible keys, times v."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    visible = visible_pairs(q.shape[1], window)
    s = np.einsum("hqd,hkd->hqk", q, k) * scale
    logits = s + cope_term(q, s, table, visible)
    if row_scale is not None:
        logits = logits * np.asarray(row_scale, np.float64)[..., None]
    logits = np.where(visible[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", weights, v)


def operands(seed: int, heads: int, length: int, dh: int):
    """q, k, v (H, L, Dh) float32 normal draws."""
    return jax.random.normal(jax.random.PRNGKey(seed), (3, heads, length, dh))


def test_positions_are_the_sum_of_the_gates_from_key_to_query():
    """p_ij = sum over visible t = j..i of sigmoid(s_it), written out as loops, equals the
    flipped cumulative sum, and the module's positions (a sliding window of 4, no clamp)."""
    logits = np.random.default_rng(0).normal(size=(2, 7, 7))
    visible = visible_pairs(7, window=4)
    got = cope_positions(logits, visible, 100)
    for h, i, j in np.ndindex(2, 7, 7):
        gates = [1 / (1 + np.exp(-logits[h, i, t])) for t in range(j, i + 1) if visible[i, t]]
        assert got[h, i, j] == pytest.approx(sum(gates), rel=1e-12, abs=0.0)
    module = contextual_positions(jnp.asarray(logits, jnp.float32), jnp.asarray(visible), 100)
    np.testing.assert_allclose(np.asarray(module, np.float64), got, rtol=1e-6, atol=1e-6)
    assert np.all(got[:, ~visible_pairs(7)] == 0)  # keys after the query count nothing
    diagonal = got[:, np.arange(7), np.arange(7)]
    assert np.all((diagonal > 0) & (diagonal < 1))  # p_ii = g_ii
    assert np.all(np.diff(got, axis=2)[:, visible[:, 1:] & visible[:, :-1]] < 0)


def check_reference_attention(seed, heads, length, npos_max, window, rows):
    """The reference path with CoPE against the float64 transcription."""
    q, k, v = operands(seed, heads, length, 4)
    table = random_table(seed, npos_max, 4)
    rng = np.random.default_rng(seed)
    row_scale = jnp.asarray(rng.uniform(0.2, 2.0, (heads, length)), jnp.float32) if rows else None
    positions = jnp.arange(length, dtype=jnp.int32)
    got = REFERENCE(
        q, k, v, positions, encoding(table), scale=0.37, window=window, row_scale=row_scale
    )
    want = cope_attention(q, k, v, table, 0.37, window, row_scale)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=2e-5)
    if window is None and length >= 17 and npos_max <= 3:  # the clamp is reached
        s = np.einsum("hqd,hkd->hqk", np.asarray(q, np.float64), np.asarray(k, np.float64))
        assert cope_positions(s * 0.37, visible_pairs(length), 10**9).max() > npos_max


CASES = dict(
    seed=st.integers(0, 2**31 - 1),
    heads=st.integers(1, 3),
    length=st.sampled_from([1, 2, 5, 17, 40]),
    npos_max=st.sampled_from([1, 2, 3, 8, 64]),
    window=st.sampled_from([None, 3, 12]),
    rows=st.booleans(),
)


@settings(max_examples=4, deadline=None)
@given(**CASES)
@example(seed=1, heads=2, length=130, npos_max=8, window=None, rows=False)  # 2 query blocks
@example(seed=2, heads=2, length=40, npos_max=3, window=None, rows=True)  # clamped
@example(seed=3, heads=1, length=17, npos_max=64, window=5, rows=False)
def test_reference_attention_is_the_paper_formula(seed, heads, length, npos_max, window, rows):
    """The reference path with CoPE equals the float64 transcription: clamping (npos_max below
    the counts), a sliding window, a row scale applied after the term, several query blocks."""
    check_reference_attention(seed, heads, length, npos_max, window, rows)


@pytest.mark.slow  # more shapes, each compiled once
@settings(max_examples=40, deadline=None)
@given(**CASES)
def test_reference_attention_is_the_paper_formula_over_more_shapes(
    seed, heads, length, npos_max, window, rows
):
    check_reference_attention(seed, heads, length, npos_max, window, rows)


def test_gradients_are_the_transcriptions_finite_differences():
    """d sum(sin(out)) / d(q, k, table) by autodiff of the reference path equals central
    differences of the float64 transcription: through the gates and the interpolation weight
    w (floor and ceil carry no gradient), the clamp included (npos_max 4 < the counts)."""
    q, k, v = operands(7, 2, 11, 3)
    table = random_table(7, 4, 3)
    positions = jnp.arange(11, dtype=jnp.int32)

    def loss(q, k, table):
        out = reference_attention(q, k, v, positions, encoding(table), scale=0.8)
        return jnp.sum(jnp.sin(out))

    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, jnp.asarray(table))
    args = [np.asarray(x, np.float64) for x in (q, k, table)]

    def numeric(which: int) -> np.ndarray:
        grad = np.zeros_like(args[which])
        for index in np.ndindex(grad.shape):
            values = []
            for step in (1e-6, -1e-6):
                moved = [a.copy() for a in args]
                moved[which][index] += step
                values.append(np.sin(cope_attention(moved[0], moved[1], v, moved[2], 0.8)).sum())
            grad[index] = (values[0] - values[1]) / 2e-6
        return grad

    s = np.einsum("hqd,hkd->hqk", args[0], args[1]) * 0.8
    assert cope_positions(s, visible_pairs(11), 10**9).max() > 3  # the clamp is reached
    for which in range(3):
        want = numeric(which)
        np.testing.assert_allclose(np.asarray(got[which], np.float64), want, rtol=1e-3, atol=1e-4)


def test_attend_batches_and_auto_picks_the_reference_path_at_any_length():
    """`attend` over (B, H, L, Dh) with CoPE equals the transcription per sequence; auto picks
    reference at any length and backend, blocked and cudnn are refused, naming model.attention."""
    q, k, v = jax.random.normal(jax.random.PRNGKey(4), (3, 2, 2, 21, 4))
    table = random_table(5, 6, 4)
    enc = encoding(table)
    positions = jnp.arange(21)[None].repeat(2, 0)
    got = eqx.filter_jit(attend)(q, k, v, positions, enc, scale=0.5)
    for b in range(2):
        want = cope_attention(q[b], k[b], v[b], table, 0.5)
        np.testing.assert_allclose(np.asarray(got[b], np.float64), want, rtol=1e-4, atol=2e-5)
    limit = attention.REFERENCE_MAX_LENGTH
    for dtype in (jnp.float32, jnp.bfloat16):
        for implementation in ("auto", "reference"):
            chosen = choose(implementation, 4 * limit, dtype, has_bias=False, contextual=True)
            assert chosen == "reference"
    for implementation in ("blocked", "cudnn"):
        message = rf"model\.attention: {implementation} cannot add a contextual position term"
        with pytest.raises(ConfigError, match=message):
            choose(implementation, 8, jnp.bfloat16, has_bias=False, contextual=True)
        with pytest.raises(ConfigError, match=message):
            attend(q, k, v, positions, enc, scale=0.5, implementation=implementation)
    with pytest.raises(ConfigError, match=r"model\.attention: blocked cannot add"):
        blocked_attention(q[0], k[0], v[0], positions[0], enc, scale=0.5)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), offset=st.integers(0, 10**6))
def test_output_ignores_the_integer_positions(seed, offset):
    """Any positions (offset, gapped, repeated) give bit-equal outputs, in attention and in the
    whole model."""
    q, k, v = operands(seed, 2, 19, 4)
    enc = encoding(random_table(seed, 8, 4))
    rng = np.random.default_rng(seed)
    plain = jnp.arange(19, dtype=jnp.int32)
    other = jnp.asarray(offset + np.sort(rng.integers(0, 50, 19)), jnp.int32)
    np.testing.assert_array_equal(
        REFERENCE(q, k, v, plain, enc, scale=0.4), REFERENCE(q, k, v, other, enc, scale=0.4)
    )
    model = with_table(make_model(tiny_trial("cope")), random_table(seed, 64, 8))
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (2, 16), 0, 24)
    pos = jnp.asarray(offset + np.sort(rng.integers(0, 60, (2, 16)), axis=1), jnp.int32)
    plain = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (2, 16))
    np.testing.assert_array_equal(FORWARD(model, tokens, plain), FORWARD(model, tokens, pos))


def with_table(model, table):
    """The model with its CoPE table replaced by `table` (npos_max, d_head)."""
    return eqx.tree_at(lambda m: m.position, model, encoding(table))


FORWARD = eqx.filter_jit(lambda model, tokens, positions: model(tokens, positions))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), cut=st.integers(0, 128), window=st.sampled_from([None, 9]))
def test_masked_keys_have_no_gate(seed, cut, window):
    """Changing the keys and values after query `cut` leaves outputs 0..cut unchanged: future
    keys' gates do not count (2 query blocks, so keys inside a query's block are changed too)."""
    q, k, v = operands(seed, 2, 130, 4)
    k2, v2 = operands(seed + 1, 2, 130, 4)[1:]
    later = (jnp.arange(130) > cut)[None, :, None]
    k2, v2 = jnp.where(later, 5.0 * k2, k), jnp.where(later, v2, v)
    enc = encoding(random_table(seed, 64, 4))
    positions = jnp.arange(130, dtype=jnp.int32)
    out = np.asarray(REFERENCE(q, k, v, positions, enc, scale=0.6, window=window))
    out2 = np.asarray(REFERENCE(q, k2, v2, positions, enc, scale=0.6, window=window))
    np.testing.assert_array_equal(out[:, : cut + 1], out2[:, : cut + 1])
    assert not np.allclose(out[:, cut + 1 :], out2[:, cut + 1 :])


def first_layer_qk(model, tokens):
    """(q, k) of the first layer, (H, L, Dh) float64, and its logit scale."""
    first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, model.blocks)
    length = tokens.shape[0]
    h = first.attn_norm(model.embed(tokens, jnp.arange(length)))
    heads = first.attn.heads
    q = np.asarray(first.attn.q(h), np.float64).reshape(length, heads, -1).transpose(1, 0, 2)
    k = np.asarray(first.attn.k(h), np.float64).reshape(length, heads, -1).transpose(1, 0, 2)
    return q, k, first.attn.scale


def test_model_logits_are_nope_logits_plus_the_term():
    """First-layer logits of a CoPE model minus those of the same weights without position
    information equal the transcribed term (0 on masked pairs), at offset positions."""
    model = with_table(make_model(tiny_trial("cope", width=32, head_dim=8)), random_table(1, 6, 8))
    nope = eqx.tree_at(lambda m: m.position, model, NoPE())
    tokens = jax.random.randint(jax.random.PRNGKey(0), (12,), 0, 24)
    pos = jnp.arange(12, dtype=jnp.int32) * 3 + 100
    diff = np.asarray(model.attention_logits(tokens, pos), np.float64) - np.asarray(
        nope.attention_logits(tokens, pos), np.float64
    )
    q, k, scale = first_layer_qk(model, tokens)
    s = np.einsum("hqd,hkd->hqk", q, k) * scale
    want = cope_term(q, s, random_table(1, 6, 8), visible_pairs(12))
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(diff, want, rtol=1e-5, atol=1e-4)


def test_config_fields_validation_and_parameter_count():
    cfg = from_dict(
        TrialConfig, {"model": {"position": {"kind": "cope", "cope": {"npos_max": 16}}}}
    )
    assert cfg.model.position.options == CopeConfig(npos_max=16)
    assert to_dict(cfg)["model"]["position"]["cope"] == {"npos_max": 16}
    with pytest.raises(ConfigError, match=r"model.position.cope.npos: unknown key 'npos'"):
        from_dict(TrialConfig, {"model": {"position": {"kind": "cope", "cope": {"npos": 1}}}})
    tiny = tiny_trial("cope")
    for value in (0, -3, 2.5, True):
        message = rf"model.position.cope.npos_max: must be an integer >= 1, got {value!r}"
        with pytest.raises(ConfigError, match=message):
            validate(replace(tiny, **{"model.position.cope.npos_max": value}))
    for implementation in ("blocked", "cudnn"):
        with pytest.raises(
            ConfigError, match=r"model.attention: model.position.cope runs on the reference"
        ):
            validate(replace(tiny, **{"model.attention": implementation}))
    validate(replace(tiny, **{"model.attention": "reference", "model.position.cope.npos_max": 1}))
    with pytest.raises(ConfigError, match="randomized: needs an encoding that takes positions"):
        validate(
            replace(
                tiny, **{"model.position.randomized": True, "model.position.random_max_length": 64}
            )
        )
    nope = count_params(make_model(tiny_trial("none")))
    d_head = tiny.model.d_head
    for npos in (64, 5):
        trial = validate(replace(tiny, **{"model.position.cope.npos_max": npos}))
        model = make_model(trial)
        assert count_params(model) - nope == npos * d_head
        assert CopeConfig(npos_max=npos).n_params(trial.model, max_length=1) == npos * d_head
        assert model.position.table.shape == (npos, d_head)
        assert np.all(np.asarray(model.position.table) == 0)  # the paper's init: zeros


def test_sweep_plan_counts_the_gates_cumulative_sums_and_q_dot_e():
    """Per layer and sequence of length L: 2 L npos_max D for z = q . e, and 5 per head and
    pair of the full L x L (gate, cumulative sum, interpolation weight, two products and sum);
    a training step counts it 3 times, evaluation once per eval length."""
    trial = validate(tiny_trial("cope", depth=2, steps=10))  # width 32, 4 heads, L 16, npos 64
    nope = validate(tiny_trial("none", depth=2, steps=10))
    per_layer = {n: 2 * n * 64 * 32 + 5 * 4 * n * n for n in (8, 16, 32)}
    assert per_layer[16] == 65536 + 5120
    assert CopeConfig().extra_flops(trial.model, 16) == 70656
    cost, base = estimate_cost(trial), estimate_cost(nope)
    train_seqs = 10 * 8
    assert cost["train_flops"] - base["train_flops"] == 3 * train_seqs * 2 * 70656
    eval_seqs = 1 * 4  # one pass (no scalings), eval.batches x eval.batch_size
    assert trial.eval_lengths == (8, 16, 32)
    want_eval = eval_seqs * 2 * sum(per_layer.values())
    assert cost["eval_flops"] - base["eval_flops"] == want_eval
    assert cost["n_params"] - base["n_params"] == 64 * 8


@pytest.mark.slow  # a short training run; the formula and NTK tests pin the numbers
def test_training_moves_the_rows_the_counts_reach():
    cfg = tiny_trial("cope", steps=20)  # length 16: p_ij <= i - j + 1 <= 16
    trained = np.asarray(train(cfg).model.position.table)
    assert np.all(trained[:2] != 0)  # every p_ii = g_ii lies in (0, 1)
    np.testing.assert_array_equal(trained[17:], 0.0)  # rows no count can reach


@pytest.mark.slow  # ~29 s on 2 cores
def test_ntk_matches_the_brute_force_jacobian():
    """sequence_kernel of a CoPE model equals the brute-force kernel from jax.jacrev over all
    parameters, CoPE's table included: F(x) = sum_i logits_i / sqrt(V) ("trace")."""
    model = make_model(tiny_trial("cope", width=16, head_dim=8, vocab=11))
    model = with_table(model, random_table(2, 4, 8))
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 11))
    _, own, _ = ntk_against_jacrev(model, tokens, lambda p: p.position.table)
    assert own.sum() == 4 * 8


@pytest.mark.slow  # compiles a 1024-token forward
def test_forward_bytes_bounds_xla_with_the_per_pair_arrays():
    """The evaluation memory bound (7 float32 values per head and pair held by the term) holds
    against XLA's own estimate, within the factor tests/model/test_memory.py allows."""
    from tests.model.test_memory import xla_temp_bytes_per_sequence

    cfg = ModelConfig(width=128, depth=2, position=PositionConfig(kind="cope"))
    cfg = replace(tiny_trial("cope"), model=cfg).model
    assert CopeConfig().bias_floats_per_pair(cfg) == 7 * cfg.n_heads
    xla = xla_temp_bytes_per_sequence(cfg, 256, 1024)
    bound = forward_bytes(cfg, 256, 1024)
    assert xla <= bound <= 2.5 * xla, (xla / 2**20, bound / 2**20)

"""Attention implementations against a float64 masked softmax, and against each other.

The oracle is plain attention written out in NumPy: logits q k^T * scale + bias over the whole
(H, L, L), causal (and sliding-window) mask, softmax, weights @ v.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, replace
from rope_lab.model import attention, flash
from rope_lab.model.attention import choose, fused_attention
from rope_lab.model.attention_logits import SOFTMAX
from rope_lab.ntk.kernels import sequence_kernel
from rope_lab.registry import POSITIONS
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

# the kernels under plain softmax; attention variants have their own tests (test_attention_fns)
attend = functools.partial(attention.attend, variant=SOFTMAX)
blocked_attention = functools.partial(attention.blocked_attention, variant=SOFTMAX)
reference_attention = functools.partial(attention.reference_attention, variant=SOFTMAX)

KINDS = POSITIONS.names()
BIAS_KINDS = [k for k in KINDS if "bias" in POSITIONS[k].hooks]
# jitted, so hypothesis examples of one shape share a compilation
BLOCKED = eqx.filter_jit(blocked_attention)
REFERENCE = eqx.filter_jit(reference_attention)
ENCODINGS = {kind: make_model(tiny_trial(kind, width=16, head_dim=4)).position for kind in KINDS}


def oracle(q, k, v, bias, scale, window=None) -> np.ndarray:
    """(H, L, Dh) float64 masked-softmax attention; bias (H, L, L) or None."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("hqd,hkd->hqk", q, k) * scale
    if bias is not None:
        logits = logits + np.asarray(bias, np.float64)
    i, j = np.arange(q.shape[1])[:, None], np.arange(q.shape[1])[None, :]
    visible = (j <= i) if window is None else (j <= i) & (i - j < window)
    logits = np.where(visible[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", weights, v)


def operands(seed: int, length: int, heads: int = 4, dh: int = 4):
    q, k, v = jax.random.normal(jax.random.PRNGKey(seed), (3, heads, length, dh))
    return q, k, v


def with_bias(kind):
    """The encoding when it has a bias hook (what `attend` hands the kernels), else None."""
    return ENCODINGS[kind] if kind in BIAS_KINDS else None


BLOCKED_CASES = {
    "kind": st.sampled_from(["none", *BIAS_KINDS]),
    "length": st.sampled_from([1, 7, 16, 29]),
    "block": st.sampled_from([1, 4, 16, 64]),
    "window": st.sampled_from([None, 1, 5, 12]),
    "offset": st.integers(0, 3000),
    "seed": st.integers(0, 99),
}


def _blocked_and_reference_law(kind, length, block, window, offset, seed):
    """Both kernels equal the float64 masked softmax on gapped positions from `offset`."""
    q, k, v = operands(seed, length)
    rng = np.random.default_rng(seed)
    positions = jnp.asarray(offset + np.cumsum(rng.integers(1, 4, length)), jnp.int32)
    enc = with_bias(kind)
    bias = None if enc is None else enc.bias(positions, positions)
    want = oracle(q, k, v, bias, 0.37, window)
    got_blocked = BLOCKED(q, k, v, positions, enc, scale=0.37, window=window, block=block)
    got_reference = REFERENCE(q, k, v, positions, enc, scale=0.37, window=window)
    for got in (got_blocked, got_reference):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=2e-6)


# every example compiles both kernels for its shapes: the default run draws one besides a
# fixed learned-bias case (a window, blocks that do not divide L); -m slow draws eight
@settings(max_examples=1, deadline=None)
@example(kind="kerple_log", length=29, block=4, window=5, offset=2000, seed=7)
@given(**BLOCKED_CASES)
def test_blocked_and_reference_equal_the_masked_softmax(kind, length, block, window, offset, seed):
    """For every encoding, block sizes that do and do not divide L, offset and gapped positions,
    with and without a sliding window."""
    _blocked_and_reference_law(kind, length, block, window, offset, seed)


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(**BLOCKED_CASES)
def test_blocked_and_reference_equal_the_masked_softmax_extended(
    kind, length, block, window, offset, seed
):
    _blocked_and_reference_law(kind, length, block, window, offset, seed)


def loss_of(fn, **kw):
    """sum(sin(attention)) of the operands (q, k, v, encoding), a generic scalar loss."""
    return lambda ops, positions: jnp.sum(jnp.sin(fn(*ops[:3], positions, ops[3], **kw)))


@pytest.mark.parametrize("kind", ["none", *BIAS_KINDS])
@pytest.mark.parametrize(
    ("length", "block", "window"),
    [(13, 4, None), pytest.param(21, 8, 6, marks=pytest.mark.slow)],
)
def test_blocked_gradients_equal_autodiff_of_the_reference(kind, length, block, window):
    """The custom VJP (recomputed tiles, bias parameters through the encoding's own bias)
    gives autodiff's gradients of the reference path, for q, k, v and the encoding's params.
    (The kernels see rotated q and k, so encodings without a bias differ only upstream.)"""
    ops = (*operands(length, length), with_bias(kind))
    positions = jnp.arange(length, dtype=jnp.int32) * 3 + 7
    grad = lambda fn, **kw: eqx.filter_jit(
        eqx.filter_grad(loss_of(fn, scale=0.5, window=window, **kw))
    )
    want = grad(reference_attention)(ops, positions)
    got = grad(blocked_attention, block=block)(ops, positions)
    leaves = jax.tree.leaves(want)
    assert len(leaves) == 3 + (len(jax.tree.leaves(eqx.filter(ops[3], eqx.is_inexact_array))))
    for a, b in zip(jax.tree.leaves(got), leaves, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(b).max())))
    if POSITIONS[kind].learned:  # the bias has parameters of its own: they get gradients
        assert any(float(np.abs(x).max()) > 0 for x in jax.tree.leaves(got[3]))


@settings(max_examples=8, deadline=None)
@given(
    kind=st.sampled_from(["none", "alibi", "kerple_log"]),
    length=st.sampled_from([1, 9, 23]),
    block=st.sampled_from([4, 16]),
    window=st.sampled_from([None, 6]),
    seed=st.integers(0, 99),
)
def test_row_scale_multiplies_each_querys_logits_bias_included(kind, length, block, window, seed):
    """softmax(r_i (q_i k_j s + b_ij)): the oracle with the row scale applied to the whole
    logit row, for both implementations (and r = 1 is the unscaled attention)."""
    q, k, v = operands(seed, length)
    rng = np.random.default_rng(seed)
    rows = jnp.asarray(rng.uniform(0.0, 3.0, (4, length)), jnp.float32)
    positions = jnp.arange(length, dtype=jnp.int32) * 2
    enc = with_bias(kind)
    bias = (
        np.zeros((4, length, length)) if enc is None else np.asarray(enc.bias(positions, positions))
    )
    logits = np.einsum("hqd,hkd->hqk", np.asarray(q, np.float64), np.asarray(k, np.float64)) * 0.37
    scaled = np.asarray(rows, np.float64)[..., None] * (logits + bias)
    # the oracle at unit scale, bias-only input: feed the scaled logits as the bias of zero q
    want = oracle(np.zeros_like(q), k, v, scaled, 0.37, window)
    kw = dict(scale=0.37, window=window, row_scale=rows)
    got_blocked = BLOCKED(q, k, v, positions, enc, block=block, **kw)
    got_reference = REFERENCE(q, k, v, positions, enc, **kw)
    for got in (got_blocked, got_reference):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", ["none", "kerple_log"])
def test_row_scale_gradients_of_the_blocked_kernel_equal_autodiff(kind):
    """d/d(row scale), d/dq and the bias parameters' gradients through the custom VJP equal
    autodiff of the reference path."""
    length = 19
    q, k, v = operands(3, length)
    rows = jax.random.uniform(jax.random.PRNGKey(4), (4, length), minval=0.2, maxval=2.0)
    positions = jnp.arange(length, dtype=jnp.int32)

    def loss(fn, **kw):
        def f(ops):
            q, k, v, enc, r = ops
            out = fn(q, k, v, positions, enc, scale=0.5, window=7, row_scale=r, **kw)
            return jnp.sum(jnp.sin(out))

        return eqx.filter_jit(eqx.filter_grad(f))((q, k, v, with_bias(kind), rows))

    want, got = loss(reference_attention), loss(blocked_attention, block=5)
    assert float(np.abs(want[4]).max()) > 1e-3
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(b).max())))


def test_bias_gradients_reach_the_encoding_and_would_be_wrong_without_it():
    """KERPLE's r1, r2 gradients through the blocked kernel are nonzero and equal autodiff's;
    a kernel that ignored them would leave the encoding's gradient at zero."""
    enc = ENCODINGS["kerple_log"]
    ops = (*operands(1, 24), enc)
    positions = jnp.arange(24, dtype=jnp.int32)
    g = eqx.filter_jit(eqx.filter_grad(loss_of(blocked_attention, scale=0.5, block=5)))(
        ops, positions
    )[3]
    want = eqx.filter_jit(eqx.filter_grad(loss_of(reference_attention, scale=0.5)))(ops, positions)[
        3
    ]
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(want), strict=True):
        assert float(np.abs(b).min()) > 1e-4
        np.testing.assert_allclose(a, b, rtol=1e-4)


@given(block=st.integers(1, 9), n_blocks=st.integers(1, 9), window=st.integers(1, 40))
def test_visited_key_blocks_are_exactly_those_with_a_visible_pair(block, n_blocks, window):
    """The blocked kernel skips a tile iff no query of it sees any key of it."""
    for w in (None, window):
        plan = flash.BlockPlan(block, n_blocks, 1.0, w)
        for i in range(n_blocks):
            first, stop = (int(x) for x in plan.key_blocks(jnp.asarray(i)))
            for j in range(n_blocks):
                has_pair = bool(np.asarray(plan.mask(jnp.asarray(i), jnp.asarray(j))).any())
                assert has_pair == (first <= j < stop), (i, j, first, stop)


def temp_bytes(fn, length: int, **kw) -> int:
    """XLA's temporary-buffer bytes of one forward + backward of attention at `length`."""
    q = jnp.zeros((4, length, 32))
    positions = jnp.arange(length)

    def grads(q, k, v):
        return jax.grad(lambda *a: jnp.sum(fn(*a, positions, None, scale=0.1, **kw)), (0, 1, 2))(
            q, k, v
        )

    return jax.jit(grads).lower(q, q, q).compile().memory_analysis().temp_size_in_bytes


def test_blocked_memory_grows_linearly_with_length_and_reference_quadratically():
    """Training memory (forward and backward) per doubling of L: the blocked kernel adds a
    constant-ratio increment (linear), the reference path's increment quadruples."""

    def increment_ratio(fn, **kw):
        m1, m2, m4 = (temp_bytes(fn, n, **kw) for n in (1024, 2048, 4096))
        return (m4 - m2) / (m2 - m1)

    assert increment_ratio(blocked_attention, block=256) < 2.3
    assert increment_ratio(reference_attention) > 3.5


@pytest.mark.parametrize("window", [None, 5])
def test_fused_attention_equals_blocked_without_bias(window):
    """The cuDNN call's layout, scale and window, checked through JAX's XLA implementation of the
    same `jax.nn.dot_product_attention` call (batched operands (B, H, L, Dh))."""
    q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, 2, 4, 19, 8))
    got = fused_attention(q, k, v, scale=0.3, window=window, implementation=None)
    for b in range(2):
        want = oracle(q[b], k[b], v[b], None, 0.3, window)
        np.testing.assert_allclose(np.asarray(got[b], np.float64), want, rtol=2e-5, atol=2e-6)


def test_auto_choice_and_errors_on_cpu():
    assert jax.default_backend() == "cpu"
    limit = attention.REFERENCE_MAX_LENGTH
    assert choose("auto", limit, jnp.float32, has_bias=False) == "reference"
    assert choose("auto", limit + 1, jnp.float32, has_bias=True) == "blocked"
    assert choose("blocked", 8, jnp.bfloat16, has_bias=True) == "blocked"
    with pytest.raises(ConfigError, match=r"model.attention: cudnn needs a CUDA GPU; the backend"):
        choose("cudnn", 8, jnp.bfloat16, has_bias=False)
    with pytest.raises(ConfigError, match="allowed: auto, blocked, reference, cudnn"):
        choose("flash", 8, jnp.float32, has_bias=False)
    assert choose("auto", 4 * limit, jnp.float32, has_bias=False, contextual=True) == "reference"
    with pytest.raises(ConfigError, match=r"model.attention: blocked cannot add a contextual"):
        choose("blocked", 8, jnp.float32, has_bias=False, contextual=True)


# Three families in the default run (rotation, fixed bias, learned bias); every kind under -m slow
# but those with a contextual term (CoPE), which run on the reference path only.
AGREE_KINDS = [
    k if k == "rope" else pytest.param(k, marks=pytest.mark.slow)  # ~15 s a kind
    for k in KINDS
    if "contextual" not in POSITIONS[k].hooks
]


@pytest.mark.parametrize("kind", AGREE_KINDS)
def test_models_agree_across_implementations_with_batched_random_positions(kind):
    """A (B, L) batch with per-row randomised positions: logits and every parameter gradient of
    the blocked model equal the reference model's (block 4 does not divide L 14)."""
    cfg = tiny_trial(kind, width=16, head_dim=4, depth=2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 14), 0, 24)
    positions = jnp.sort(jax.random.choice(jax.random.PRNGKey(2), 60, (3, 14), replace=False), 1)
    results = []
    for impl in ("reference", "blocked"):
        model = make_model(replace(cfg, **{"model.attention": impl}))

        def loss(m):
            return jnp.sum(jnp.sin(m(tokens, positions)))

        results.append(eqx.filter_jit(eqx.filter_value_and_grad(loss))(model))
    (ref_value, ref_grads), (value, grads) = results
    np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-4)  # a sum of 1008 sines
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        # atol 1e-5: a per-head constant logit bias (FIRE's b2) has an exactly zero gradient
        # (softmax is shift-invariant), so both sides hold only rounding noise (~1e-6) there.
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max())))


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(flash, "BLOCK", 4)


@pytest.mark.parametrize("kind", [pytest.param("rope", marks=pytest.mark.slow), "kerple_log"])
def test_ntk_through_the_blocked_kernel_equals_the_reference(kind, small_blocks):
    """The empirical NTK (jax.jacrev through the custom VJP, vmapped) of a blocked model equals
    the reference model's, which tests/ntk/test_kernels.py checks against a brute-force Jacobian."""
    cfg = tiny_trial(kind, width=16, head_dim=8, vocab=11)
    tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (3, 10), 0, 11))
    kernels = [
        np.asarray(
            sequence_kernel(make_model(replace(cfg, **{"model.attention": impl})), tokens, tokens),
            np.float64,
        )
        for impl in ("reference", "blocked")
    ]
    np.testing.assert_allclose(kernels[1], kernels[0], rtol=2e-4, atol=1e-6 * abs(kernels[0]).max())


def test_attend_batches_and_picks_per_the_config():
    """`attend` over (B, H, L, Dh) equals the per-sequence kernels."""
    q, k, v = jax.random.normal(jax.random.PRNGKey(4), (3, 2, 4, 9, 4))
    positions = jnp.arange(9)[None].repeat(2, 0)
    enc = ENCODINGS["alibi"]
    got = attend(q, k, v, positions, enc, scale=0.5, implementation="blocked")
    for b in range(2):
        want = oracle(q[b], k[b], v[b], enc.bias(positions[b], positions[b]), 0.5)
        np.testing.assert_allclose(np.asarray(got[b], np.float64), want, rtol=2e-5, atol=2e-6)

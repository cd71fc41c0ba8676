"""Relative-position remaps (ReRoPE, Leaky ReRoPE, Self-Extend, Dual Chunk Attention, STRING)
against independent transcriptions of their papers' definitions.

The oracle writes each method as the papers do, a relative position per (query, key) pair,
and computes attention in float64 NumPy with q rotated by that relative position: RoPE's logit
q R(p_i)^T R(p_j) k depends on p_i - p_j alone, so this is the method's attention whatever
position sets rope_lab splits it into.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model import attention, rope
from rope_lab.model.attention_logits import SOFTMAX
from rope_lab.model.positions.modules.remapped import RemappedRotary
from rope_lab.model.positions.modules.rotary import RotaryPE
from rope_lab.model.transformer import with_scaling
from rope_lab.registry import SCALINGS
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

# the kernels under plain softmax; attention variants have their own tests (test_attention_fns)
attend = functools.partial(attention.attend, variant=SOFTMAX)
blocked_attention = functools.partial(attention.blocked_attention, variant=SOFTMAX)

REMAPS = [k for k in SCALINGS.names() if SCALINGS[k].remaps]


# ---------------------------------------------------------------------------------------------
# the papers' definitions, as relative positions of query i and key j (positions, not indices)


def rerope(i, j, window):
    """Su 2023: min(i - j, w)."""
    d = i - j
    return np.where(d < window, d, window)


def leaky_rerope(i, j, window, k):
    """Su 2023: i - j inside the window, w + (i - j - w) / k beyond."""
    d = i - j
    return np.where(d < window, d, window + (d - window) / k)


def self_extend(i, j, group, window):
    """Jin et al. 2024: neighbour attention below W, grouped attention
    floor(i / G) - floor(j / G) + W - floor(W / G) from W on."""
    d = i - j
    return np.where(d < window, d, i // group - j // group + window - window // group)


def dual_chunk(i, j, chunk_size, local_window):
    """An et al. 2024 (the authors' code): chunks of c = chunk_size - local_window tokens; keys at
    j mod c; queries at i mod c (same chunk), min(i mod c + c, chunk_size) (previous chunk),
    min(2c - 1, chunk_size) (earlier chunks)."""
    c = chunk_size - local_window
    gap = i // c - j // c
    key = j % c
    intra = i % c - key
    successive = np.minimum(i % c + c, chunk_size) - key
    inter = min(2 * c - 1, chunk_size) - key
    return np.where(gap == 0, intra, np.where(gap == 1, successive, inter))


def string(i, j, shift, local_window):
    """An et al. 2025: i - j below S, i - j - S + W from S on."""
    d = i - j
    return np.where(d < shift, d, d - shift + local_window)


# (method, factor, params, the oracle's relative positions)
CASES = [
    ("rerope", 1.0, {"window": 6}, lambda i, j: rerope(i, j, 6)),
    ("leaky_rerope", 4.0, {"window": 6}, lambda i, j: leaky_rerope(i, j, 6, 4.0)),
    ("self_extend", 3.0, {"window": 5}, lambda i, j: self_extend(i, j, 3, 5)),
    (
        "dual_chunk",
        1.0,
        {"chunk_size": 12, "local_window": 3},
        lambda i, j: dual_chunk(i, j, 12, 3),
    ),
    ("string", 1.0, {"shift": 9, "local_window": 2}, lambda i, j: string(i, j, 9, 2)),
]
IDS = [c[0] for c in CASES]
# the three-set method by default, every method in the slow suite
SLOW_BUT_DCA = [
    pytest.param(*case, marks=() if case[0] == "dual_chunk" else pytest.mark.slow, id=case[0])
    for case in CASES
]


def test_every_remap_has_a_case() -> None:
    assert sorted(IDS) == sorted(REMAPS)


def sets_of(method: str, factor: float, params: dict, train_length: int = 32):
    return rope.scaling_config(method, **params).rule(factor, train_length)


def pairs(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return positions[:, None], positions[None, :]


@pytest.mark.parametrize(("method", "factor", "params", "paper"), CASES, ids=IDS)
@settings(max_examples=25, deadline=None)
@given(offset=st.integers(0, 5000), length=st.integers(1, 60))
def test_relative_positions_are_the_papers(method, factor, params, paper, offset, length) -> None:
    positions = np.arange(length) + offset
    got = sets_of(method, factor, params).relative(positions, positions)
    i, j = pairs(positions)
    causal = j <= i
    np.testing.assert_allclose(got[causal], np.broadcast_to(paper(i, j), got.shape)[causal])


# ---------------------------------------------------------------------------------------------
# attention


def oracle(q, k, v, inv_freq, relative, scale) -> np.ndarray:
    """(H, L, Dh) float64 causal attention with query i rotated by relative[i, j] for key j
    (half-split rotary layout, keys unrotated)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    heads, length, dh = q.shape
    half = len(inv_freq)
    angles = relative[..., None] * np.asarray(inv_freq, np.float64)  # (L, L, r/2)
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = q[..., :half], q[..., half : 2 * half]
    # q_i rotated by each pair's angle: (H, L, L, r), then the unrotated rest
    qa = a[:, :, None] * cos[None] - b[:, :, None] * sin[None]
    qb = b[:, :, None] * cos[None] + a[:, :, None] * sin[None]
    rest = np.broadcast_to(q[:, :, None, 2 * half :], (heads, length, length, dh - 2 * half))
    rotated = np.concatenate([qa, qb, rest], -1)
    kk = np.repeat(k, heads // k.shape[0], axis=0)
    logits = np.einsum("hqkd,hkd->hqk", rotated, kk) * scale
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    logits = np.where((j <= i)[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", weights, np.repeat(v, heads // v.shape[0], axis=0))


def remapped_operands(method, factor, params, length, *, kv_heads=2, rotary_dim=6, seed=0):
    inv, _ = rope.inv_freq("default", rotary_dim, theta=100.0)
    encoding = RemappedRotary(RotaryPE(inv, 1.0), sets_of(method, factor, params))
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.random.normal(kq, (length, 4, 8))
    k = jax.random.normal(kk, (length, kv_heads, 8))
    v = jax.random.normal(kv, (kv_heads, length, 8))
    return encoding, inv, q, k, v


@pytest.mark.parametrize(("method", "factor", "params", "paper"), CASES, ids=IDS)
@pytest.mark.parametrize("implementation", ["reference", "blocked"])
def test_attention_equals_the_float64_oracle(method, factor, params, paper, implementation):
    """Offset positions, grouped-query heads, a partial rotation, blocks of 8 over 37 tokens."""
    length, offset, scale = 37, 11, 0.3
    encoding, inv, q, k, v = remapped_operands(method, factor, params, length)
    positions = jnp.arange(length) + offset
    qs, ks = encoding.rotate(q, k, positions)  # (S, L, H, Dh)
    qs, ks = jnp.swapaxes(qs, -3, -2), jnp.swapaxes(ks, -3, -2)
    if implementation == "blocked":
        ks_full = jnp.repeat(ks, 2, axis=-3)
        vs = jnp.repeat(v, 2, axis=0)
        out = blocked_attention(qs, ks_full, vs, positions, encoding, scale=scale, block=8)
    else:
        out = attend(qs, ks, v, positions, encoding, scale=scale, implementation="reference")
    i, j = pairs(np.asarray(positions))
    want = oracle(np.swapaxes(q, 0, 1), np.swapaxes(k, 0, 1), v, inv, paper(i, j), scale)
    np.testing.assert_allclose(np.asarray(out), want, atol=2e-5)


@pytest.mark.parametrize(("method", "factor", "params", "paper"), SLOW_BUT_DCA)
def test_blocked_gradients_equal_autodiff_of_the_reference(method, factor, params, paper):
    length = 29
    encoding, _, q, k, v = remapped_operands(method, factor, params, length, kv_heads=4, seed=1)
    positions = jnp.arange(length) + 3
    qs, ks = (jnp.swapaxes(x, -3, -2) for x in encoding.rotate(q, k, positions))

    def loss(kernel, qs, ks, v):
        out = kernel(qs, ks, v)
        return jnp.sum(out * jnp.sin(jnp.arange(out.size).reshape(out.shape)))

    reference = lambda a, b, c: attend(
        a, b, c, positions, encoding, scale=0.5, implementation="reference"
    )
    blocked = lambda a, b, c: blocked_attention(a, b, c, positions, encoding, scale=0.5, block=8)
    want = jax.grad(lambda *x: loss(reference, *x), argnums=(0, 1, 2))(qs, ks, v)
    got = jax.grad(lambda *x: loss(blocked, *x), argnums=(0, 1, 2))(qs, ks, v)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5)


# ---------------------------------------------------------------------------------------------
# through the model


TRIAL = tiny_trial("rope", depth=2, length=16)
MODEL = make_model(TRIAL)
TOKENS = jnp.arange(40) % 20


def _implementation(implementation: str):
    """The same weights under another attention implementation (a static field)."""
    model_cfg = dataclasses.replace(TRIAL.model, attention=implementation)
    return make_model(dataclasses.replace(TRIAL, model=model_cfg))


# parameters that put every pair of 40 tokens in the exact set
COVERING = {
    "rerope": {"window": 40},
    "leaky_rerope": {"window": 40},
    "self_extend": {"window": 40},
    "dual_chunk": {"chunk_size": 48, "local_window": 4},
    "string": {"shift": 40, "local_window": 1},
}


@pytest.mark.parametrize("method", REMAPS)
def test_a_remap_whose_window_covers_the_sequence_is_the_model(method) -> None:
    remapped = with_scaling(MODEL, method, 2.0, COVERING[method], seq_len=40)
    assert isinstance(remapped.position, RemappedRotary)
    np.testing.assert_allclose(remapped(TOKENS), MODEL(TOKENS), atol=2e-5)


@pytest.mark.parametrize(("method", "factor", "params", "paper"), SLOW_BUT_DCA)
def test_model_implementations_agree_and_the_remap_matters(method, factor, params, paper):
    reference = with_scaling(_implementation("reference"), method, factor, params)(TOKENS)
    blocked = with_scaling(_implementation("blocked"), method, factor, params)(TOKENS)
    np.testing.assert_allclose(blocked, reference, atol=2e-5)
    assert float(jnp.abs(reference - MODEL(TOKENS)).max()) > 1e-3


def test_attention_logits_of_a_remap_are_the_papers() -> None:
    """`Attention.logits` (analysis) rotates each pair by the method's relative position: pair
    (i, j) equals the plain model's logit with token i moved to position j + d."""
    remapped = with_scaling(MODEL, "rerope", 1.0, {"window": 5}, seq_len=12)
    attn = jax.tree.map(lambda a: a[0], remapped.blocks.attn)
    x = jax.random.normal(jax.random.PRNGKey(2), (12, MODEL.config.width))
    got = attn.logits(x, jnp.arange(12), remapped.position)
    plain = jax.jit(lambda p: attn.logits(x, p, MODEL.position))
    for i in range(12):
        for j in range(i + 1):
            moved = np.arange(12)
            moved[i] = j + int(rerope(i, j, 5))
            np.testing.assert_allclose(got[:, i, j], plain(moved)[:, i, j], rtol=1e-4, atol=1e-5)


def test_a_remap_keeps_the_trained_frequencies() -> None:
    trained = make_model(tiny_trial("rope", length=16, scaling="linear", factor=2.0))
    remapped = with_scaling(trained, "self_extend", 2.0, None, seq_len=64)
    np.testing.assert_array_equal(
        remapped.position.inner.inv_freq.value, trained.position.inv_freq.value
    )
    rescaled = with_scaling(remapped, "linear", 4.0, None, seq_len=64)  # a scaling under it
    assert isinstance(rescaled.position, RemappedRotary)
    want, _ = rope.inv_freq("linear", 8, factor=4.0, original_length=16)
    np.testing.assert_allclose(rescaled.position.inner.inv_freq.value, want)


# ---------------------------------------------------------------------------------------------
# parameters


@pytest.mark.parametrize(
    ("method", "factor", "expected"),
    [
        ("rerope", 1.0, {"window": 32, "slope": 0.0}),
        ("leaky_rerope", 8.0, {"window": 32, "slope": 0.125}),
        ("self_extend", 4.0, {"group": 4, "window": 16}),
        ("dual_chunk", 1.0, {"chunk_size": 48, "local_window": 4}),
        ("string", 1.0, {"shift": 21, "local_window": 4}),
    ],
)
def test_defaults_from_the_training_length(method, factor, expected) -> None:
    """At L_train 64: ReRoPE's window L / 2; Self-Extend's neighbour window L / 4; DCA's
    chunk 3/4 L and local window L / 16 (the authors' defaults); STRING's shift L / 3 and local
    window min(128, L / 16)."""
    got = dataclasses.asdict(rope.scaling_config(method).rule(factor, 64))
    assert got == expected


def test_string_keeps_the_authors_local_value_at_long_lengths() -> None:
    assert rope.scaling_config("string").rule(1.0, 131072).local_window == 128


def test_rerope_never_rotates_past_its_window() -> None:
    positions = np.arange(500)
    relative = sets_of("rerope", 1.0, {"window": 24}).relative(positions, positions)
    assert relative[np.tril_indices(500)].max() == 24


def test_dual_chunk_never_rotates_past_its_chunk_size() -> None:
    positions = np.arange(700)
    relative = sets_of("dual_chunk", 1.0, {}, train_length=64).relative(positions, positions)
    causal = relative[np.tril_indices(700)]
    assert causal.min() == 0 and causal.max() == 48


def trial_with(**eval_fields):
    cfg = tiny_trial("rope", length=32)
    return replace(cfg, eval=dataclasses.replace(cfg.eval, **eval_fields))


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"methods": ("self_extend",), "factors": (2.5,)}, r"eval.methods\[0\].*whole number"),
        (
            {
                "methods": ("dual_chunk",),
                "method_params": (("dual_chunk", (("chunk_size", 8), ("local_window", 8))),),
            },
            r"eval.methods\[0\].*local_window must be smaller than chunk_size \(8\)",
        ),
        (
            {"methods": ("rerope",), "method_params": (("rerope", (("window", 0),)),)},
            r"eval.methods\[0\].*window must be an integer >= 1, got 0",
        ),
    ],
)
def test_bad_parameters_are_refused_naming_the_key(fields, match) -> None:
    with pytest.raises(ConfigError, match=match):
        validate(trial_with(**fields))


def test_a_remap_is_not_a_training_scaling() -> None:
    with pytest.raises(ConfigError, match=r"model.position.rope.scaling: 'rerope' remaps"):
        validate(tiny_trial("rope", scaling="rerope"))


def _first_changed_length(sets, longest: int = 400) -> int:
    """Brute force: the shortest length at which some causal pair leaves set 0 or its exact
    relative position (`longest` + 1 if none does up to `longest`)."""
    p = np.arange(longest, dtype=np.float32)
    q, k = pairs(p)
    causal = q >= k
    changed = causal & ((sets.choice(p, p) != 0) | (sets.relative(p, p) != q - k))
    rows = np.nonzero(changed.any(axis=1))[0]
    return int(rows[0]) + 1 if rows.size else longest + 1


@pytest.mark.parametrize(("method", "factor", "params", "paper"), CASES, ids=IDS)
@settings(max_examples=10, deadline=None)
@given(train_length=st.integers(8, 300), defaults=st.booleans())
def test_exact_below_is_the_longest_length_the_remap_leaves_unchanged(
    method, factor, params, paper, train_length, defaults
) -> None:
    sets = sets_of(method, factor, {} if defaults else params, train_length)
    assert _first_changed_length(sets) == sets.exact_below + 1

"""The Transformer: shapes, causality, scaling swaps, parametrisations."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.config import replace
from rope_lab.model import attention, memory
from rope_lab.model.memory import causal_blocks
from rope_lab.model.positions.modules import Frozen
from rope_lab.model.transformer import count_params, trainable, with_scaling
from rope_lab.registry import POSITIONS, SCALINGS
from rope_lab.trial.optimizer import decay_mask, lr_multipliers
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial
from tests.model.scalings.test_registry import EXAMPLE_PARAMS

KINDS = POSITIONS.names()  # every registered encoding
# the slower whole-model checks run every kind under -m slow, rope and alibi by default
FAST_KINDS = [
    k if k in ("rope", "alibi") else pytest.param(k, marks=pytest.mark.slow) for k in KINDS
]
forward = eqx.filter_jit(lambda model, tokens: model(tokens))


@pytest.mark.parametrize("kind", KINDS)
def test_forward_shape_and_finite(kind):
    model = make_model(tiny_trial(kind))
    logits = forward(model, jnp.arange(10) % 24)
    assert logits.shape == (10, 24) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))


@pytest.mark.parametrize("kind", KINDS)
@given(t=st.integers(0, 11), seed=st.integers(0, 1000))
def test_causality(kind, t, seed):
    model = MODELS[kind]
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (12,), 0, 24)
    changed = tokens.at[t].set((tokens[t] + 1) % 24)
    a, b = forward(model, tokens), forward(model, changed)
    np.testing.assert_array_equal(np.asarray(a[:t]), np.asarray(b[:t]))
    assert not np.allclose(a[t:], b[t:])


MODELS = {kind: make_model(tiny_trial(kind, depth=2)) for kind in KINDS}


@given(length=st.sampled_from([1, 7, 16]), factor=st.floats(1.0, 8.0), seed=st.integers(0, 100))
def test_dynamic_equals_default_up_to_train_length(length, factor, seed):
    model = MODELS["rope"]  # L_train = 16
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (length,), 0, 24)
    dynamic = with_scaling(model, "dynamic", factor, seq_len=length)
    np.testing.assert_array_equal(forward(dynamic, tokens), forward(model, tokens))


@pytest.mark.parametrize("kind", FAST_KINDS)
@pytest.mark.parametrize("length", [pytest.param(12, marks=pytest.mark.slow), 13])
def test_reference_query_blocks_equal_full_attention(kind, length, monkeypatch):
    """The reference path's query blocks, each seeing only its key prefix, give full masked
    attention's outputs and gradients (ATTENTION_BLOCK 4: blocks of 4, 4, 4 at L = 12 and
    5, 5, 3 at L = 13)."""
    model = MODELS[kind]
    tokens = jax.random.randint(jax.random.PRNGKey(length), (length,), 0, 24)
    positions = jnp.arange(length) + 3

    def run(block):
        monkeypatch.setattr(memory, "ATTENTION_BLOCK", block)

        def loss(m):  # a new function per setting: the block layout is fixed at trace time
            return jnp.sum(jnp.sin(m(tokens, positions)))

        return eqx.filter_jit(eqx.filter_value_and_grad(loss))(model)

    blocks = []
    monkeypatch.setattr(attention, "causal_blocks", _recording(causal_blocks, blocks))
    (full, full_grads), (split, split_grads) = run(10_000), run(4)
    assert [len(b) for b in blocks] == [1, 1, 3, 3]  # each of the 2 layers traced once
    np.testing.assert_allclose(split, full, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(split_grads), jax.tree.leaves(full_grads), strict=True):
        # float32 reordering error of a sum scales with its terms, i.e. the leaf's largest entry
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(b).max())))


@pytest.mark.slow  # ~27 s on 2 cores
def test_jacobian_rows_equal_single_output_gradients():
    """`jax.jacrev` of all (L, V) logits (a vmapped transpose, as the NTK's multi-output
    features take it) gives each output's own gradient (one `jax.vjp` per output). It did not
    when the layers ran as a compiled `lax.scan`: rows past the first were off by up to 150%."""
    model = make_model(tiny_trial("none", width=16, depth=2, head_dim=8))
    params, static = eqx.partition(model, trainable(model))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (16,), 0, 24)

    def f(p):
        return eqx.combine(p, static)(tokens)

    out = f(params)
    jac = jax.jacrev(f)(params)
    _, pull = jax.vjp(f, params)
    for index in range(0, out.size, 7):
        row = jax.tree.map(lambda x, i=index: x.reshape(out.size, *x.shape[2:])[i], jac)
        grad = pull(jnp.zeros(out.size).at[index].set(1.0).reshape(out.shape))[0]
        for a, b in zip(jax.tree.leaves(row), jax.tree.leaves(grad), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def test_deep_stacks_scan_to_the_same_outputs(monkeypatch):
    """Past MAX_UNROLL blocks the layers run as a scan over groups: same logits and gradients
    as the loop."""
    from rope_lab.model import transformer

    model = MODELS["rope"]
    tokens = jax.random.randint(jax.random.PRNGKey(2), (10,), 0, 24)

    def run():
        loss = lambda m: jnp.sum(jnp.sin(m(tokens)))
        return eqx.filter_jit(eqx.filter_value_and_grad(loss))(model)

    (looped, looped_grads) = run()
    monkeypatch.setattr(transformer, "MAX_UNROLL", 1)  # depth 2: a scan of 2 steps
    (scanned, scanned_grads) = run()
    np.testing.assert_allclose(scanned, looped, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(scanned_grads), jax.tree.leaves(looped_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize(  # rope by default (~20 s a kind), every kind -m slow
    "kind", [k if k == "rope" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS]
)
def test_batched_call_equals_vmapped_sequences(kind):
    """A (B, L) batch (one matmul per dense layer over B L tokens, attention vmapped) gives
    each sequence's own logits and the same parameter gradients, with per-row positions."""
    model = MODELS[kind]
    tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 10), 0, 24)
    positions = jnp.sort(jax.random.choice(jax.random.PRNGKey(2), 40, (3, 10)), axis=1)
    positions = positions + jnp.arange(3)[:, None]  # rows differ

    def batched(m):
        return m(tokens, positions)

    def per_sequence(m):
        return jax.vmap(m)(tokens, positions)

    for fn in (batched, per_sequence):
        assert fn(model).shape == (3, 10, 24)
    np.testing.assert_allclose(batched(model), per_sequence(model), rtol=1e-5, atol=1e-6)
    grads = [
        eqx.filter_jit(eqx.filter_grad(lambda m, fn=fn: jnp.sum(jnp.sin(fn(m)))))(model)
        for fn in (batched, per_sequence)
    ]
    for a, b in zip(*(jax.tree.leaves(g) for g in grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    shared = model(tokens[:, :7], jnp.arange(7) + 5)  # (L,) positions broadcast over the batch
    np.testing.assert_allclose(shared[1], model(tokens[1, :7], jnp.arange(7) + 5), rtol=1e-5)


def _recording(fn, calls):
    def wrapped(length):
        calls.append(fn(length))
        return calls[-1]

    return wrapped


def test_dynamic_differs_beyond_train_length():
    model = MODELS["rope"]
    tokens = jnp.arange(40) % 24
    dynamic = with_scaling(model, "dynamic", 2.0, seq_len=40)
    assert not np.allclose(forward(dynamic, tokens)[20:], forward(model, tokens)[20:])


def test_scaling_swap_does_not_recompile():
    model = MODELS["rope"]
    traces = []

    @eqx.filter_jit
    def f(m, tokens):
        traces.append(1)
        return m(tokens)

    tokens = jnp.arange(32) % 24
    outs = {
        kind: f(with_scaling(model, kind, 2.0, EXAMPLE_PARAMS.get(kind), seq_len=32), tokens)
        for kind in SCALINGS.names()  # every registered frequency scaling
        if not SCALINGS[
            kind
        ].remaps  # a remap is a new program (tests/model/scalings/test_remaps.py)
    }
    assert len(traces) == 1
    assert not np.allclose(outs["linear"], outs["ntk"])


def test_with_scaling_leaves_non_rope_unchanged():
    model = MODELS["alibi"]
    assert with_scaling(model, "linear", 4.0, seq_len=64) is model


def test_frozen_buffers_are_not_trainable():
    model = MODELS["rope"]
    mask = trainable(model)
    frozen = [x for x in jax.tree.leaves(mask, is_leaf=lambda x: isinstance(x, Frozen))]
    assert not any(isinstance(x, Frozen) for x in frozen)
    params = eqx.filter(model, mask)
    assert params.position.inv_freq.value is None
    assert count_params(model) == sum(x.size for x in jax.tree.leaves(params))
    grads = eqx.filter_grad(lambda m: m(jnp.arange(8)).sum())(model)
    assert float(jnp.abs(grads.position.inv_freq.value).max()) == 0.0


def test_learned_table_rows_past_train_length_get_no_gradient():
    model = MODELS["learned"]
    grads = eqx.filter_grad(lambda m: m(jnp.arange(16) % 24).sum())(model)
    table = np.asarray(grads.position.table)
    assert np.abs(table[:16]).sum() > 0
    assert np.abs(table[16:]).sum() == 0


def test_decay_mask_only_linear_weights():
    model = MODELS["rope"]
    mask = decay_mask(model)
    assert mask.head.weight is True and mask.blocks.attn.q.weight is True
    assert mask.embedding is False and mask.final_norm.weight is False


@pytest.mark.parametrize("param", ["sp", "ntk", "mup"])
@pytest.mark.parametrize(("norm", "mlp"), [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_parametrisations_and_variants_run(param, norm, mlp):
    cfg = replace(
        tiny_trial("rope"), **{"model.parametrization": param, "model.norm": norm, "model.mlp": mlp}
    )
    model = make_model(cfg)
    logits = forward(model, jnp.arange(8))
    assert bool(jnp.all(jnp.isfinite(logits)))


def test_mup_lr_multipliers():
    cfg = replace(
        tiny_trial("rope", width=64), **{"model.parametrization": "mup", "model.base_width": 16}
    )
    mults = lr_multipliers(make_model(cfg))
    assert mults.blocks.attn.q.weight == 0.25 and mults.head.weight == 0.25
    assert mults.embedding == 1.0 and mults.final_norm.weight == 1.0


@pytest.mark.slow  # trains 2 parametrisations x 3 widths
def test_mup_coordinate_check():
    """Under muP the change of the logits after a few Adam steps stays order one as width
    grows 4x (the coordinate check of Tensor Programs V); under SP with the same lr it grows."""
    from rope_lab.trial.train import train

    def logit_change(width, param):
        cfg = replace(
            tiny_trial("rope", width=width, head_dim=8, steps=5),
            **{
                "model.parametrization": param,
                "model.base_width": 32,
                "train.warmup_steps": 0,
                "train.lr": 1e-2,
            },
        )
        model0 = make_model(cfg)
        model1 = train(cfg, model=model0).model
        tokens = jnp.arange(16) % 24
        delta = forward(model1, tokens) - forward(model0, tokens)
        return float(jnp.sqrt(jnp.mean(delta**2)))

    mup = [logit_change(w, "mup") for w in (32, 128)]
    sp = [logit_change(w, "sp") for w in (32, 128)]
    print("coordinate check, logit change at width 32, 128: mup", mup, "sp", sp)
    assert 0.5 < mup[1] / mup[0] < 2.0, mup
    assert sp[1] / sp[0] > mup[1] / mup[0], (sp, mup)


def test_bfloat16_compute_runs():
    cfg = tiny_trial("rope")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype="bfloat16"))
    logits = forward(make_model(cfg), jnp.arange(8))
    assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))

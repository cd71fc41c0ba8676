"""The Forgetting Transformer (`model.attention_fn: fox`, `fox_pro`) against an independent dense
transcription of o_i = sum_j softmax_j(q_i k_j scale + sum_{l=j+1..i} log f_l) v_j with
f_l = sigmoid(x_l w_h + b_h): values and gradients on the reference path and the blocked
kernel, cached decoding against the forward at every step, its limits, and its refusals."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, TrialConfig, from_dict, replace, validate
from rope_lab.model.attention_layer import Attention
from rope_lab.model.decode import generate, prefill
from rope_lab.model.decode_padded import generate_padded
from rope_lab.model.factory import make_model
from rope_lab.model.kv_cache import init_cache
from rope_lab.ntk.kernels import param_group
from tests.helpers import tiny_trial
from tests.model.test_decode import CAPACITY, TOKENS, assert_equals_teacher_forcing, jittered

HEADS, DH, LENGTH = 2, 4, 11
WIDTH = HEADS * DH


def _layer(fn: str, implementation: str = "reference", seed: int = 0, **changes):
    cfg = validate(
        replace(
            tiny_trial("none", width=WIDTH, head_dim=DH),
            **{"model.attention_fn": fn, "model.attention": implementation, **changes},
        )
    )
    layer = Attention(cfg.model, train_length=16, key=jax.random.PRNGKey(seed))
    if layer.forget is not None:  # a bias off 0, so a wrong sign or offset shows
        bias = jax.random.normal(jax.random.PRNGKey(seed + 7), (HEADS,))
        layer = eqx.tree_at(lambda a: a.forget.bias, layer, bias)
    return layer, make_model(cfg).encoding_of(0)


def dense(layer: Attention, x, window: int | None = None):
    """(L, D) output of a NoPE FoX layer in JAX, the decay written as the explicit sum of the
    log forget gates over l = j+1..i (an (L, L, L) indicator), for values and autodiff
    gradients."""
    q, k, v = (x @ getattr(layer, n).weight.T for n in ("q", "k", "v"))
    log_f = jax.nn.log_sigmoid(x @ layer.forget.weight.T + layer.forget.bias[None])  # (L, H)
    i, j, gate = (jnp.arange(len(x)).reshape(s) for s in ((-1, 1, 1), (1, -1, 1), (1, 1, -1)))
    between = ((gate > j) & (gate <= i)).astype(x.dtype)  # (L, L, L): j < l <= i
    decay = jnp.einsum("ijl,lh->hij", between, log_f)
    visible = (j[..., 0] <= i[..., 0]) & (
        True if window is None else (i[..., 0] - j[..., 0] < window)
    )
    heads = []
    for h in range(HEADS):
        part = slice(h * DH, (h + 1) * DH)
        z = q[:, part] @ k[:, part].T * layer.scale + decay[h]
        a = jax.nn.softmax(jnp.where(visible, z, -jnp.inf), axis=-1)
        heads.append(a @ v[:, part])
    out = jnp.concatenate(heads, axis=-1)
    if layer.gate is not None:
        out = out * jax.nn.sigmoid(x @ layer.gate.weight.T)
    return out @ layer.o.weight.T


@pytest.mark.parametrize("fn", ["fox", "fox_pro"])
@pytest.mark.parametrize("implementation", ["reference", "blocked"])
def test_the_layer_equals_the_dense_formula_in_values_and_gradients(fn, implementation):
    layer, encoding = _layer(fn, implementation)
    x = jax.random.normal(jax.random.PRNGKey(3), (LENGTH, WIDTH))
    positions = jnp.arange(LENGTH)
    got = layer(x, positions, encoding)
    np.testing.assert_allclose(got, dense(layer, x), rtol=2e-5, atol=2e-6)
    cot = jax.random.normal(jax.random.PRNGKey(5), (LENGTH, WIDTH))
    grads = jax.grad(lambda a: jnp.sum(a(x, positions, encoding) * cot))(layer)
    oracle = jax.grad(lambda a: jnp.sum(dense(a, x) * cot))(layer)
    for name in ("q", "k", "v", "forget"):  # the forget gate's weights and biases included
        for a, b in zip(jax.tree.leaves(getattr(grads, name)),
                        jax.tree.leaves(getattr(oracle, name)), strict=True):  # fmt: skip
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_a_sliding_window_and_blocks_that_do_not_divide_the_length():
    layer, encoding = _layer("fox", "blocked", **{"model.layers": ()})
    x = jax.random.normal(jax.random.PRNGKey(4), (LENGTH, WIDTH))
    from rope_lab.config import LayerConfig

    got = layer(x, jnp.arange(LENGTH), encoding, LayerConfig(window=4))
    np.testing.assert_allclose(got, dense(layer, x, window=4), rtol=2e-5, atol=2e-6)


def test_a_gate_that_never_forgets_is_softmax():
    """f -> 1 (a bias of +40: log f ~ -4e-18) leaves the softmax layer with the same weights."""
    fox, encoding = _layer("fox")
    plain, _ = _layer("softmax")
    for name in ("q", "k", "v", "o"):  # the forget gate has its own init key
        np.testing.assert_array_equal(getattr(fox, name).weight, getattr(plain, name).weight)
    fox = eqx.tree_at(lambda a: a.forget.bias, fox, jnp.full((HEADS,), 40.0))
    x = jax.random.normal(jax.random.PRNGKey(6), (LENGTH, WIDTH))
    positions = jnp.arange(LENGTH)
    np.testing.assert_allclose(
        fox(x, positions, encoding), plain(x, positions, encoding), rtol=1e-6, atol=1e-7
    )
    strong = eqx.tree_at(lambda a: a.forget.bias, fox, jnp.full((HEADS,), -40.0))
    _, _, v = strong.project(x, positions, encoding)  # f -> 0: each query reads its own value
    np.testing.assert_allclose(
        strong(x, positions, encoding), strong.output(x, v), rtol=1e-5, atol=1e-6
    )


def test_fox_is_its_own_trial_refused_where_it_cannot_run():
    base = validate(tiny_trial("none"))
    fox = validate(replace(base, **{"model.attention_fn": "fox"}))
    assert fox.trial_id.startswith("passkey-none-fox-w32-d1-L16-s0-")
    import polars as pl

    from rope_lab.analysis.curve_labels import label_expr
    from rope_lab.results.columns import flatten_config

    row = pl.DataFrame([{**flatten_config(fox), "method": "none", "factor": 1.0}])
    assert row.select(label_expr(row.columns))["label"].item() == "none +fox"
    assert param_group(".blocks.attn.forget.weight") == "attention_qk"
    decoded = validate(replace(fox, **{"eval.decode.protocols": ("prefill_fixed",)}))
    assert decoded.eval.decode.protocols == ("prefill_fixed",)  # cached decoding carries c
    with pytest.raises(ConfigError, match=r"cudnn cannot compute model.attention_fn 'fox'"):
        validate(replace(fox, **{"model.attention": "cudnn"}))


# ------------------------------------------------------------------------ cached decoding

WINDOWED = ({"window": 3}, {})  # a kind whose ring buffer of 3 slots wraps, then a full one


def _decoding_trial(fn: str, layers: tuple = (), kind: str = "none", depth: int = 2):
    """A trial of 2 layers at L_train 8: without `layers` one kind repeated (the cache scans
    its repeats)."""
    parsed = from_dict(TrialConfig, {"model": {"layers": list(layers)}}).model.layers
    base = tiny_trial(kind, width=16, head_dim=4, depth=depth, length=8)
    changes = {"eval.length_multipliers": (1.0, 2.0), "model.attention_fn": fn}
    return validate(replace(base, **changes, **{"model.layers": parsed}))


def _decoding_model(fn: str, layers: tuple = (), kind: str = "none", depth: int = 2):
    """`_decoding_trial`'s model with every array moved (the forget biases off 0)."""
    return jittered(make_model(_decoding_trial(fn, layers, kind, depth)))


def _decoding_case(fn: str, name: str):
    """(fn, layers) of test_cached_decoding_...: the windowed fox by default, the rest -m slow
    (without a window test_registered.py decodes both variants already, and fox_pro's output
    gate is decoded there too)."""
    layers = {"full": (), "window": WINDOWED}[name]
    marks = () if (fn, name) == ("fox", "window") else pytest.mark.slow
    return pytest.param(fn, layers, id=f"{fn}-{name}", marks=marks)


@pytest.mark.parametrize(
    ("fn", "layers"),
    [_decoding_case(fn, name) for fn in ("fox", "fox_pro") for name in ("full", "window")],
)
def test_cached_decoding_equals_the_forward_at_every_step(fn, layers):
    """Teacher forcing: prefill of 5 tokens, then one decode_step per token, gives the logits of
    the uncached forward at every position (the cache holds each key's cumulative log gate;
    a windowed kind keeps its last 3)."""
    model = _decoding_model(fn, layers)
    repeats = 2 // len(model.config.pattern)
    for layer in init_cache(model, CAPACITY).layers:  # per repeat, query head and slot
        assert layer.decay.shape == (repeats, 4, layer.k.shape[2])
    assert_equals_teacher_forcing(model, TOKENS)


def test_prefill_caches_the_cumulative_log_gates_of_the_kept_tokens():
    """c of slot s is the forward's `log_decay` of the token the slot holds (the window's last
    3 tokens 4, 5, 6 in slots 1, 2, 0)."""
    model = _decoding_model("fox", WINDOWED)
    _, cache = prefill(model, TOKENS[:7], CAPACITY)
    x = model.embed(TOKENS[:7], jnp.arange(7))
    block = jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, model.blocks)
    want = block.attn.log_decay(block.attn_norm(x))  # (H, 7): the first layer's c
    np.testing.assert_array_equal(cache.layers[0].index, [6, 4, 5])
    np.testing.assert_allclose(cache.layers[0].decay[0], want[:, [6, 4, 5]], rtol=1e-6)


def test_the_planned_cache_size_counts_the_cached_log_gates():
    """`memory.kv_cache_bytes` (sweep plan's KV cache column) equals the keys, values and
    cumulative log gates `init_cache` holds (float32 keys and values: 4 bytes each)."""
    from rope_lab.model.memory import kv_cache_bytes

    trial = _decoding_trial("fox", WINDOWED)
    cache = init_cache(make_model(trial), 24)
    held = sum(layer.k.nbytes + layer.v.nbytes + layer.decay.nbytes for layer in cache.layers)
    assert kv_cache_bytes(trial.model, 24) == held
    # 4 heads x (3 + 24) slots x 4 bytes more than softmax's
    assert held - kv_cache_bytes(_decoding_trial("softmax", WINDOWED).model, 24) == 4 * 27 * 4


def _generate_batch(model, buffers, prompt_length, steps, max_steps: int, program: str):
    """`generate_padded` of each buffer (B, C), as the decode evaluation vmaps it."""
    one = lambda b: generate_padded(model, b, prompt_length, steps, max_steps, program=program)
    return jax.vmap(one)(buffers)


# the cached program in the default run, the other two (the same code around it) with -m slow
@pytest.mark.parametrize(
    "program", ["cached", *(pytest.param(p, marks=pytest.mark.slow) for p in ("recompute", "full"))]
)
def test_padded_batched_greedy_decoding_is_the_forward_of_its_own_tokens(program):
    """Greedy answers of a batch of right-padded prompts (RoPE, a window that wraps), under
    each program the decode protocols run: each step's logits are the uncached forward's row
    over the prompt and the tokens fed back, each token their argmax, whatever the pads
    hold; one compiled program for every prompt and answer length."""
    model = _decoding_model("fox_pro", WINDOWED, kind="rope")
    run = eqx.filter_jit(lambda *args: _generate_batch(*args))  # a compilation cache of its own
    forward = jax.jit(jax.vmap(model))
    pads = jnp.stack([jnp.flip(TOKENS), TOKENS])[:, :CAPACITY]
    pads = jnp.concatenate([pads, pads], axis=1)[:, :CAPACITY].astype(jnp.int32)
    prompts = jnp.stack([TOKENS, jnp.roll(TOKENS, 3)]).astype(jnp.int32)
    for p, steps in [(3, 2), (7, 8)]:
        buffers = pads.at[:, :p].set(prompts[:, :p])
        tokens, logits = run(model, buffers, jnp.int32(p), jnp.int32(steps), 8, program)
        fed = buffers.at[:, p : p + steps - 1].set(tokens[:, : steps - 1])
        want = forward(fed)[:, p - 1 : p + steps - 1]
        np.testing.assert_allclose(logits[:, :steps], want, rtol=2e-5, atol=2e-5)
        np.testing.assert_array_equal(tokens[:, :steps], np.asarray(want).argmax(-1))
    assert run._cached._cache_size() == 1


def test_greedy_generate_is_the_forward_of_its_own_tokens():
    """`generate` (prefill, then a scan of decode steps): each logit row is the forward's over
    the prompt and the tokens fed back."""
    model = _decoding_model("fox", WINDOWED)
    tokens, logits = jax.jit(generate, static_argnums=(2, 3))(model, TOKENS[:6], 9, CAPACITY)
    want = model(jnp.concatenate([TOKENS[:6], tokens[:-1]]))[5:]
    np.testing.assert_allclose(logits, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(tokens, np.asarray(want).argmax(-1))


@pytest.mark.slow  # a compile per protocol; the decode step it runs is pinned above by default
def test_re_rotating_the_cache_is_exact_in_one_layer_under_dynamic_ntk():
    """per_step_recompute re-rotates every cached key with each step's frequencies and reads
    the cached log gates as they are: in one layer its logits equal per_step_full's (a forward
    over each prefix under its own scaling) at every step, past L_train = 8 included."""
    model = _decoding_model("fox", kind="rope", depth=1)
    run = jax.jit(generate, static_argnums=(2, 3), static_argnames=("protocol", "scaling"))
    out = {
        p: np.asarray(
            run(model, TOKENS[:6], 8, CAPACITY, protocol=p, scaling=("dynamic", 2.0, None))[1]
        )
        for p in ("per_step_recompute", "per_step_full")
    }
    np.testing.assert_allclose(
        out["per_step_recompute"], out["per_step_full"], rtol=2e-5, atol=3e-5
    )


@pytest.mark.slow  # the by-hand answers run one eager forward per token
def test_the_decode_evaluation_scores_the_greedy_answers_of_full_forwards():
    """A fox_pro trial with a decode protocol: `decode_scores` (batched, right-padded to a
    capacity of 20, one program) scores each sequence's 6-token answer as greedy decoding by
    full forwards gives it; sequence 0's targets are its own answer, so it is exactly right."""
    from rope_lab.tasks import task_from_config
    from rope_lab.tasks.sampling import sample_batch
    from rope_lab.trial.decode_eval import answer_length, decode_scores
    from tests.trial.test_decode_eval import _greedy_by_hand

    changes = {"model.attention_fn": "fox_pro", "eval.decode.protocols": ("prefill_fixed",),
               "eval.length_multipliers": (1.0,)}  # fmt: skip
    base = tiny_trial("none", width=16, head_dim=4, task_params=(("needle_length", 6),))
    cfg = validate(replace(base, **changes))
    model = jittered(make_model(cfg))
    batch = sample_batch(task_from_config(cfg.task), 3, 16, split="eval", key=jax.random.PRNGKey(3))
    tokens, targets, mask = (np.array(x) for x in (batch.tokens, batch.targets, batch.mask))
    m = answer_length(mask)
    answers = [_greedy_by_hand(model, tokens[i, : 16 - m + 1], m) for i in range(3)]
    targets[0, 16 - m :] = answers[0]
    exact, accuracy = decode_scores(model, tokens, targets, mask, protocol="prefill_fixed",
                                    scaling=None, capacity=20, max_steps=m + 1)  # fmt: skip
    for i, answer in enumerate(answers):
        right = answer == targets[i, 16 - m :]
        assert exact[i] == right.all() and accuracy[i] == pytest.approx(right.mean())
    assert exact[0]

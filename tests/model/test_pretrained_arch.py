"""Pretrained-architecture options: grouped-query attention, q/k/v biases, QK-norm, tied
embeddings, norm epsilon and decoupled head sizes; each against a brute-force equivalent."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import replace, validate
from rope_lab.model.decode import generate
from rope_lab.model.kv_cache import init_cache
from rope_lab.model.layers import Linear, Norm, fused_linear
from rope_lab.model.transformer import count_non_embedding_params, count_params, trainable
from rope_lab.sweep.plan import estimate_cost
from rope_lab.trial.optimizer import decay_mask
from rope_lab.trial.train import make_model
from tests.helpers import ntk_against_jacrev, tiny_trial

forward = eqx.filter_jit(lambda model, tokens: model(tokens))


def _trial(kind="rope", **changes):
    base = tiny_trial(kind, width=32, head_dim=8, depth=2)
    return validate(replace(base, **changes))


def _tokens(n=12, seed=0, vocab=24):
    return jax.random.randint(jax.random.PRNGKey(seed), (n,), 0, vocab)


def _randomise(model, seed=1):
    """Every trainable leaf (biases, norm weights included) drawn at random, so a term that
    is dropped or misplaced changes the output."""
    params, static = eqx.partition(model, trainable(model))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    new = [
        0.3 * jax.random.normal(k, x.shape) + (1.0 if x.ndim == 1 else 0.0)
        for k, x in zip(keys, leaves, strict=True)
    ]
    return eqx.combine(jax.tree.unflatten(tree, new), static)


def assert_implementations_agree(changes, n=20):
    """The randomised model of `_trial(**changes)` gives the same logits under the blocked
    kernel as under the reference path, on n tokens."""
    models = [
        _randomise(make_model(_trial(**{**changes, "model.attention": impl})))
        for impl in ("reference", "blocked")
    ]
    tokens = _tokens(n)
    np.testing.assert_allclose(forward(models[1], tokens), forward(models[0], tokens), atol=2e-5)


def assert_decoding_matches_forward(model, prompt_len=6, steps=8, capacity=32):
    """Greedy decoding with the KV cache gives, at each step, the full forward's logits of the
    prompt and the tokens decoded so far."""
    prompt = _tokens(prompt_len)
    tokens, logits = generate(model, prompt, steps, capacity)
    want = forward(model, jnp.concatenate([prompt, tokens[:-1]]))[prompt_len - 1 :]
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)


def _as_multi_head(gqa, mha):
    """The multi-head model `mha` holding `gqa`'s weights, each key/value head repeated for
    the query heads that read it (HF's `repeat_kv`): the brute-force grouped-query attention."""
    groups = gqa.config.n_heads // gqa.config.n_kv_heads
    dh = gqa.config.d_head

    def repeat(w):  # (depth, KV dh, D) -> (depth, H dh, D)
        depth, _, width = w.shape
        heads = w.reshape(depth, -1, dh, width)
        return jnp.repeat(heads, groups, axis=1).reshape(depth, -1, width)

    out = eqx.tree_at(lambda m: m.blocks.attn.k.weight, gqa, repeat(gqa.blocks.attn.k.weight))
    out = eqx.tree_at(lambda m: m.blocks.attn.v.weight, out, repeat(gqa.blocks.attn.v.weight))
    # the arrays in the multi-head model's tree (its static kv head count and config)
    params, static = eqx.partition(mha, eqx.is_array)
    leaves = jax.tree.leaves(eqx.filter(out, eqx.is_array))
    return eqx.combine(jax.tree.unflatten(jax.tree.structure(params), leaves), static)


@pytest.mark.parametrize("kind", ["rope", "alibi"])
@pytest.mark.parametrize("implementation", ["reference", "blocked"])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_equals_repeated_key_value_heads(kind, implementation, kv_heads):
    """GQA with G kv heads equals multi-head attention whose key/value heads are the G heads
    repeated (kv_heads = 1 is multi-query attention), under every implementation."""
    changes = {"model.attention": implementation}
    gqa = _randomise(make_model(_trial(kind, **changes, **{"model.kv_heads": kv_heads})))
    mha = make_model(_trial(kind, **changes))
    assert gqa.blocks.attn.k.weight.shape[1] == kv_heads * 8
    tokens = _tokens()
    want = forward(_as_multi_head(gqa, mha), tokens)
    np.testing.assert_allclose(forward(gqa, tokens), want, rtol=1e-5, atol=1e-5)


def test_kv_heads_equal_to_heads_is_multi_head_attention():
    a = make_model(_trial(**{"model.kv_heads": 4}))
    b = make_model(_trial())
    shapes = lambda m: [x.shape for x in jax.tree.leaves(eqx.filter(m, eqx.is_array))]
    assert shapes(a) == shapes(b)
    tokens = _tokens()
    np.testing.assert_array_equal(forward(a, tokens), forward(b, tokens))
    assert a.config.n_kv_heads == 4 and b.config.kv_heads is None
    assert _trial(**{"model.kv_heads": 4}).trial_id != _trial().trial_id  # a field set is hashed


def test_grouped_query_decoding_caches_fewer_heads_and_matches_the_forward():
    """The cache holds kv_heads heads (heads / kv_heads times fewer key/value bytes), and
    greedy decoding with it equals the argmax of full forwards."""
    trial = _trial(**{"model.kv_heads": 1})
    model = _randomise(make_model(trial))
    full = init_cache(make_model(_trial()), 32)
    small = init_cache(model, 32)
    assert small.layers[0].k.shape[1] == 1 and full.layers[0].k.shape[1] == 4
    assert full.layers[0].k.nbytes == 4 * small.layers[0].k.nbytes
    assert_decoding_matches_forward(model)


def test_qkv_bias_is_added_after_the_projection():
    key = jax.random.PRNGKey(0)
    layers = [Linear(6, n, init_std=0.5, multiplier=1.0, key=k, bias=True)
              for n, k in zip((4, 3), jax.random.split(key), strict=True)]  # fmt: skip
    layers = [eqx.tree_at(lambda lin: lin.bias, lin, jnp.arange(lin.weight.shape[0]) + 1.0)
              for lin in layers]  # fmt: skip
    x = jax.random.normal(key, (5, 6))
    for got, lin in zip(fused_linear(x, *layers), layers, strict=True):
        want = np.asarray(x) @ np.asarray(lin.weight).T + np.asarray(lin.bias)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lin(x), want, rtol=1e-5, atol=1e-6)


def test_qkv_bias_changes_the_logits_and_is_not_decayed():
    trial = _trial(**{"model.qkv_bias": True})
    model = make_model(trial)
    attn = model.blocks.attn
    assert attn.q.bias.shape == (2, 32) and attn.k.bias.shape == (2, 32) and attn.o.bias is None
    np.testing.assert_array_equal(
        forward(model, _tokens()), forward(make_model(_trial()), _tokens())
    )
    shifted = eqx.tree_at(lambda m: m.blocks.attn.v.bias, model, jnp.ones((2, 32)))
    assert not np.allclose(forward(shifted, _tokens()), forward(model, _tokens()))
    mask = decay_mask(model)
    assert mask.blocks.attn.q.weight is True and mask.blocks.attn.q.bias is False


def test_qk_norm_normalises_each_head_before_the_rotation():
    """With QK-norm, scaling the query and key projections leaves the logits unchanged
    (RMSNorm of each head undoes it) where without it the logits change."""
    tokens = _tokens()
    for qk_norm, invariant in ((True, True), (False, False)):
        changes = {"model.qk_norm": qk_norm, "model.norm": "rmsnorm"}
        model = _randomise(make_model(_trial(**changes)))
        scaled = eqx.tree_at(
            lambda m: (m.blocks.attn.q.weight, m.blocks.attn.k.weight),
            model,
            (7.0 * model.blocks.attn.q.weight, 3.0 * model.blocks.attn.k.weight),
        )
        same = np.allclose(forward(model, tokens), forward(scaled, tokens), rtol=1e-4, atol=1e-4)
        assert same is invariant
    assert model.blocks.attn.q_norm is None
    normed = make_model(_trial(**{"model.qk_norm": True, "model.norm": "rmsnorm"}))
    assert normed.blocks.attn.q_norm.weight.shape == (2, 8)


def test_norm_epsilon_enters_the_rms():
    x = jnp.array([[3.0, -4.0]])
    norm = Norm(2, "rmsnorm", eps=11.0)  # mean square 12.5: rsqrt(12.5 + 11)
    np.testing.assert_allclose(norm(x), np.array([[3.0, -4.0]]) / np.sqrt(23.5), rtol=1e-6)
    model = make_model(_trial(**{"model.norm_eps": 1e-6}))
    assert model.final_norm.eps == 1e-6 and model.blocks.attn_norm.eps == 1e-6


def test_tied_readout_is_the_embedding_transposed():
    trial = _trial(**{"model.tie_embeddings": True})
    model = _randomise(make_model(trial))
    assert model.head is None
    tokens = _tokens()
    untied = make_model(_trial())
    as_untied = eqx.tree_at(lambda m: m.head.weight, untied, model.embedding)
    arrays = eqx.filter(model, eqx.is_array)
    as_untied = eqx.tree_at(
        lambda m: (m.embedding, m.blocks, m.final_norm),
        as_untied,
        (arrays.embedding, arrays.blocks, arrays.final_norm),
    )
    np.testing.assert_allclose(forward(model, tokens), forward(as_untied, tokens), rtol=1e-6)
    v, d = model.embedding.shape
    assert count_params(untied) - count_params(model) == v * d
    assert count_non_embedding_params(model) == count_non_embedding_params(untied)


@pytest.mark.parametrize(
    "changes",
    [
        {"model.kv_heads": 2},
        {"model.qkv_bias": True, "model.kv_heads": 1},
        {"model.qk_norm": True, "model.norm": "rmsnorm"},
        {"model.tie_embeddings": True},
        {"model.heads": 2, "model.head_dim": 24, "model.kv_heads": 1},
    ],
)
def test_plan_counts_the_parameters_of_each_option(changes):
    trial = _trial(**changes)
    model = make_model(trial)
    cost = estimate_cost(trial)
    assert cost["n_params"] == count_params(model)
    assert cost["n_params_non_embedding"] == count_non_embedding_params(model)


def test_heads_of_their_own_size():
    """heads x head_dim need not be the width: queries project to 2 x 24 = 48 dims, the output
    projection back to 32; the logit scale is 1/sqrt(24)."""
    model = make_model(_trial(**{"model.heads": 2, "model.head_dim": 24}))
    attn = model.blocks.attn
    assert attn.q.weight.shape == (2, 48, 32) and attn.o.weight.shape == (2, 32, 48)
    assert attn.scale == pytest.approx(24**-0.5)
    assert np.isfinite(np.asarray(forward(model, _tokens()))).all()


@pytest.mark.slow  # ~26 s of brute-force Jacobians
def test_ntk_of_a_grouped_query_model_with_biases_equals_the_jacobian():
    """The empirical NTK sees the kv heads' weights and the biases (brute-force jacrev)."""
    trial = validate(
        replace(
            tiny_trial("rope", width=16, head_dim=4, depth=1),
            **{"model.kv_heads": 2, "model.qkv_bias": True},
        )
    )
    model = _randomise(make_model(trial))
    toks = jax.random.randint(jax.random.PRNGKey(3), (3, 6), 0, 24)
    _, own, _ = ntk_against_jacrev(model, toks, lambda p: p.blocks.attn.v.bias)
    assert own.sum() == 2 * 4


@pytest.mark.parametrize("layers", [(), ({"window": 5}, {})])
def test_the_planned_cache_size_is_the_cache_decoding_holds(layers):
    """`memory.kv_cache_bytes` (sweep plan's KV cache column) equals the key and value arrays
    of `init_cache`, grouped-query and sliding-window kinds included."""
    from rope_lab.config import LayerConfig
    from rope_lab.model.memory import kv_cache_bytes

    kinds = tuple(LayerConfig(**kind) for kind in layers)
    trial = _trial(**{"model.kv_heads": 2, "model.layers": kinds})
    cache = init_cache(make_model(trial), 24)
    held = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    assert kv_cache_bytes(trial.model, 24) == held
    assert kv_cache_bytes(trial.model, 24) * 2 == kv_cache_bytes(
        _trial(**{"model.layers": kinds}).model, 24
    )


@pytest.mark.parametrize("layers", [(), ({"window": 5, "eval_scaling": False}, {})])
def test_the_planned_cache_size_under_a_remap_is_the_cache_decoding_holds(layers):
    """Under Dual Chunk Attention (3 position sets) the cache holds keys once per set in the
    layer kinds it remaps, values once: `kv_cache_bytes(..., sets=3)` equals `init_cache`'s."""
    from rope_lab.config import LayerConfig
    from rope_lab.model.memory import kv_cache_bytes
    from rope_lab.model.transformer import with_scaling

    kinds = tuple(LayerConfig(**kind) for kind in layers)
    trial = _trial(**{"model.kv_heads": 2, "model.layers": kinds})
    remapped = with_scaling(make_model(trial), "dual_chunk", 4.0)
    cache = init_cache(remapped, 24)
    held = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    assert kv_cache_bytes(trial.model, 24, sets=3) == held
    remapped_layers = 1 if layers else 2  # of depth 2; the window kind keeps its positions
    one_key_per_slot = 24 * 2 * 8 * 4  # 24 slots x 2 KV heads x head_dim 8 x float32
    extra_keys = 2 * remapped_layers * one_key_per_slot  # 3 sets: 2 more keys per slot
    assert held == kv_cache_bytes(trial.model, 24) + extra_keys

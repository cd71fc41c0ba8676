"""Cached decoding equals teacher forcing: for every encoding, layer layout and temperature,
the logits of prefill + one `decode_step` per token equal a full forward over each prefix; the
dynamic-scaling protocols differ exactly where they should."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import TrialConfig, from_dict, replace, validate
from rope_lab.model.decode import decode_step, generate, prefill, prefill_padded
from rope_lab.model.decode_padded import PROGRAMS, generate_padded, step_encodings
from rope_lab.model.factory import make_model
from rope_lab.model.kv_cache import PROTOCOLS, init_cache, slots
from rope_lab.model.transformer import trainable, with_scaling, with_temperature
from rope_lab.registry import POSITIONS
from tests.helpers import tiny_trial

PROMPT, TOTAL, CAPACITY = 5, 14, 16


def jittered(model, scale: float = 0.3, seed: int = 7):
    """The model with every trainable array moved by Gaussian noise, so that zero-initialised
    parameters (CoPE's table, T5's buckets) take part in the logits."""
    params, rest = eqx.partition(model, trainable(model))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    moved = [
        x + scale * jax.random.normal(k, x.shape, x.dtype)
        for x, k in zip(leaves, keys, strict=True)
    ]
    return eqx.combine(jax.tree.unflatten(tree, moved), rest)


def trial(kind: str = "rope", depth: int = 2, **changes) -> TrialConfig:
    """A tiny trial at L_train 8 evaluated to 16 (the learned table covers 16 positions)."""
    base = tiny_trial(kind, width=16, head_dim=4, depth=depth, length=8)
    return validate(replace(base, **{"eval.length_multipliers": (1.0, 2.0), **changes}))


def layered(layers: list[dict], *, depth: int = 4, **changes) -> TrialConfig:
    parsed = from_dict(TrialConfig, {"model": {"layers": layers}}).model.layers
    return trial(depth=depth, **{"model.layers": parsed, **changes})


def cached_logits(model, tokens, *, prompt: int = PROMPT, capacity: int = CAPACITY):
    """Logits of each position from prefill(prompt) then one decode_step per later token."""
    first, cache = jax.jit(prefill, static_argnums=2)(model, tokens[:prompt], capacity)
    rows = list(np.asarray(first))
    step = jax.jit(decode_step)
    for t in range(prompt, tokens.shape[0]):
        logits, cache = step(model, cache, tokens[t])
        rows.append(np.asarray(logits))
    return np.stack(rows)


def assert_equals_teacher_forcing(model, tokens):
    full = np.asarray(model(tokens))
    np.testing.assert_allclose(cached_logits(model, tokens), full, rtol=2e-5, atol=2e-5)


TOKENS = jax.random.randint(jax.random.PRNGKey(1), (TOTAL,), 0, 24)


# The default run decodes one encoding per hook (embed, rotate, bias, contextual: the first one
# registered with it), -m slow every encoding.
HOOKS = sorted(set().union(*(POSITIONS[k].hooks for k in POSITIONS.names())))
CORE = {next(k for k in POSITIONS.names() if hook in POSITIONS[k].hooks) for hook in HOOKS}


@pytest.mark.parametrize(
    "kind", [k if k in CORE else pytest.param(k, marks=pytest.mark.slow) for k in POSITIONS.names()]
)
def test_every_encoding_decodes_as_it_forwards(kind):
    cfg = trial(kind)
    assert_equals_teacher_forcing(jittered(make_model(cfg)), TOKENS)


@pytest.mark.parametrize(
    ("layers", "changes"),
    [
        # windows of two sizes and per-layer temperatures by default; RoPE-SWA + NoPE (RNoPE),
        # ~3x slower, -m slow
        pytest.param([{"window": 4}, {"position": {"kind": "none"}}], {}, marks=pytest.mark.slow),
        ([{"window": 3}, {"window": 6, "attn_scale": 0.5}], {"model.scalable_softmax": True}),
        # CoPE in a layout: slow (test_every_encoding_decodes_as_it_forwards decodes CoPE alone)
        pytest.param(
            [{"position": {"kind": "alibi"}, "window": 5}, {"position": {"kind": "cope"}}],
            {},
            marks=pytest.mark.slow,
        ),
        pytest.param([{"position": {"kind": "cope"}, "window": 4}], {}, marks=pytest.mark.slow),
    ],
)
def test_layouts_windows_and_temperatures_decode_as_they_forward(layers, changes):
    """Sliding-window kinds keep only their window (a ring buffer), and the model still
    decodes exactly: each query sees the same keys, in the same order, with the same row
    scale as in the full forward."""
    model = jittered(make_model(layered(layers, **changes)))
    windows = [k.window for k in model.config.pattern]
    assert slots(model, CAPACITY) == tuple(CAPACITY if w is None else w for w in windows)
    assert_equals_teacher_forcing(model, TOKENS)
    assert_equals_teacher_forcing(with_temperature(model, 1.7), TOKENS)


def test_the_cache_holds_only_a_windowed_kinds_window():
    model = make_model(layered([{"window": 4}, {}], depth=2))
    full, windowed = init_cache(model, 64).layers[1], init_cache(model, 64).layers[0]
    assert windowed.k.shape[2] == 4 and full.k.shape[2] == 64
    assert init_cache(model, 64).nbytes() < 2 * full.k.nbytes + 2 * full.v.nbytes


def test_a_prompt_longer_than_the_cache_is_refused():
    model = make_model(trial())
    with pytest.raises(ValueError, match="does not fit a cache of capacity 4"):
        prefill(model, TOKENS[:6], 4)
    generate(model, TOKENS[:6], 3, 8)  # the last token is never fed back: 8 slots suffice
    with pytest.raises(ValueError, match="exceed the cache capacity 8"):
        generate(model, TOKENS[:6], 4, 8)
    with pytest.raises(ValueError, match="unknown decode protocol 'stale'; allowed"):
        generate(model, TOKENS[:6], 1, 8, protocol="stale", scaling=("dynamic", 2.0, None))


# ------------------------------------------------------------------------ generation protocols

L_TRAIN = 8


def _rope_model(depth: int = 2):
    return jittered(make_model(trial(depth=depth)))


DYNAMIC = ("dynamic", 2.0, None)
# every length-dependent scaling follows the same protocols (the default suite runs dynamic
# NTK; dynamic YaRN, at ~15-40 s a test on 2 cores, runs with the slow tests)
SLOW = pytest.mark.slow
LENGTH_DEPENDENT = [DYNAMIC, pytest.param(("dynamic_yarn", 2.0, None), marks=SLOW)]
LENGTH_INDEPENDENT = [("yarn", 2.0, None), pytest.param(("ntk_by_parts", 2.0, None), marks=SLOW)]


def _teacher_greedy(model_at, prompt, steps):
    """Greedy tokens by full forwards, each step's model chosen by `model_at(prefix length)`."""
    seq = list(np.asarray(prompt))
    logits = []
    for _ in range(steps):
        row = np.asarray(model_at(len(seq))(jnp.asarray(seq))[-1])
        logits.append(row)
        seq.append(int(row.argmax()))
    return np.asarray(seq[len(prompt) :]), np.stack(logits)


@pytest.mark.slow  # ~39 s: one compile per length
def test_per_step_full_equals_teacher_forcing_at_every_length():
    """Each step's logits equal a full forward over the prefix with dynamic scaling taken at
    the prefix length (past L_train, so the frequencies change at every step)."""
    model, prompt = _rope_model(), TOKENS[:6]
    tokens, logits = generate(model, prompt, 8, CAPACITY, protocol="per_step_full", scaling=DYNAMIC)
    at = lambda n: with_scaling(model, "dynamic", 2.0, None, seq_len=n)
    want_tokens, want_logits = _teacher_greedy(at, prompt, 8)
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(tokens), want_tokens)


@pytest.mark.parametrize("scaling", LENGTH_DEPENDENT)
def test_re_rotating_the_cache_is_exact_in_one_layer_and_not_deeper(scaling):
    """Re-rotating every cached key with the current frequencies gives teacher forcing's logits
    in a one-layer model; with two layers the cache's values and second-layer keys were
    computed under older frequencies, so past L_train it departs from the exact answer."""
    prompt = TOKENS[:6]
    gaps = {}
    for depth in (1, 2):
        model = _rope_model(depth)
        out = {
            p: np.asarray(generate(model, prompt, 8, CAPACITY, protocol=p, scaling=scaling)[1])
            for p in ("per_step_recompute", "per_step_full")
        }
        gaps[depth] = np.abs(out["per_step_recompute"] - out["per_step_full"]).max(axis=-1)
    np.testing.assert_allclose(gaps[1], 0.0, atol=3e-5)
    inside = L_TRAIN - 6 + 1  # steps whose prefix fits L_train
    np.testing.assert_allclose(gaps[2][:inside], 0.0, atol=3e-5)
    assert gaps[2][inside + 1 :].min() > 1e-4


@pytest.mark.slow  # ~33 s; the same law at a smaller size runs by default (below)
def test_prefill_fixed_is_one_scaling_for_the_whole_generation():
    model, prompt = _rope_model(), TOKENS[:6]
    tokens, logits = generate(model, prompt, 8, CAPACITY, protocol="prefill_fixed", scaling=DYNAMIC)
    fixed = with_scaling(model, "dynamic", 2.0, None, seq_len=13)  # 6 + 8 - 1 tokens read
    want_tokens, want_logits = _teacher_greedy(lambda n: fixed, prompt, 8)
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(tokens), want_tokens)


def test_prefill_fixed_scales_once_at_the_final_length_small():
    """The law of the slow test above at a smaller size (one layer, 3 tokens past a 7-token
    prompt): every step's logits are the rows of one forward, over the 9 tokens read, of the
    model scaled at that final length, neither at the prompt's nor one token short of it."""
    model, prompt = _rope_model(depth=1), TOKENS[:7]
    tokens, logits = generate(model, prompt, 3, CAPACITY, protocol="prefill_fixed", scaling=DYNAMIC)
    read = jnp.concatenate([prompt, tokens[:-1]])  # 9 tokens, past L_train = 8
    forward = eqx.filter_jit(lambda m, x: m(x))  # one program for both scalings

    def at(n: int) -> np.ndarray:  # the rows that predict the 3 generated tokens
        return np.asarray(forward(with_scaling(model, "dynamic", 2.0, None, seq_len=n), read))[6:]

    want = at(9)
    np.testing.assert_allclose(np.asarray(logits), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(tokens), want.argmax(axis=-1))
    assert np.abs(at(8) - want).max() > 1e-4  # = the unscaled model, as at the prompt's length


@pytest.mark.parametrize("scaling", LENGTH_DEPENDENT)
def test_stale_keys_differ_from_recompute_only_once_the_length_passes_l_train(scaling):
    """Dynamic scaling leaves the frequencies alone up to L_train, so the three protocols agree
    while the sequence fits it; past it, a stale cache reads keys rotated with older
    frequencies and its logits move away from the exact ones."""
    model = _rope_model()
    prompt = TOKENS[:3]
    out = {
        p: np.asarray(generate(model, prompt, 10, CAPACITY, protocol=p, scaling=scaling)[1])
        for p in PROTOCOLS
    }
    # step t reads a prefix of 3 + t tokens: steps 0..5 fit L_train = 8
    inside = slice(0, L_TRAIN - 3 + 1)
    np.testing.assert_allclose(out["per_step_stale"][inside], out["per_step_recompute"][inside],
                               rtol=2e-5, atol=2e-5)  # fmt: skip
    gap = np.abs(out["per_step_stale"] - out["per_step_recompute"]).max(axis=-1)
    assert gap[L_TRAIN - 3 + 1] > 1e-4  # the first step past L_train, with one stale key
    assert (gap[L_TRAIN - 3 + 1 :] > 1e-4).all()


@pytest.mark.parametrize("scaling", LENGTH_INDEPENDENT)
def test_a_length_independent_scaling_gives_one_answer_under_every_protocol(scaling):
    model, prompt = _rope_model(), TOKENS[:6]
    out = [
        np.asarray(generate(model, prompt, 6, CAPACITY, protocol=p, scaling=scaling)[1])
        for p in PROTOCOLS
    ]
    for other in out[1:]:
        np.testing.assert_allclose(other, out[0], rtol=2e-5, atol=2e-5)


def test_raw_prefill_holds_keys_before_rotation():
    model = _rope_model()
    _, rotated = prefill(model, TOKENS[:6], CAPACITY)
    logits, raw = prefill(model, TOKENS[:6], CAPACITY, raw_keys=True)
    np.testing.assert_allclose(logits, model(TOKENS[:6]), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(raw.layers[0].v, rotated.layers[0].v, atol=2e-6)
    # position 0 is not rotated; every later key is
    np.testing.assert_allclose(
        raw.layers[0].k[..., 0, :], rotated.layers[0].k[..., 0, :], atol=1e-6
    )
    assert (
        np.abs(np.asarray(raw.layers[0].k[..., 1:6, :] - rotated.layers[0].k[..., 1:6, :])).max()
        > 1e-3
    )


# ------------------------------------------------------------ one program for every length

MAX_STEPS = 8
# (prompt length, answer length): a one-token answer, a prompt that fills the window, one that
# wraps it, and answers past L_train = 8 where dynamic NTK changes the frequencies every step
PADDED_CASES = [(3, 1), (5, 4), (9, 8)]
# what pads a prompt to the capacity: other tokens, which a causal prefix never reads
PADS = jnp.concatenate([jnp.flip(TOKENS), TOKENS])[:CAPACITY].astype(jnp.int32)


def _jitted_generate_padded():
    """`generate_padded` jitted with a compilation cache of its own (jax caches per function)."""
    return eqx.filter_jit(lambda *args, **kwargs: generate_padded(*args, **kwargs))


@pytest.mark.slow  # ~12-45 s each on 2 cores: a program per length for the reference
@pytest.mark.parametrize("protocol", [None, *PROTOCOLS])
def test_padded_generation_equals_the_per_length_programs(protocol):
    """Prompts right-padded to one capacity, their lengths and the answer lengths traced: the
    tokens `generate` gives at each prompt length (a sliding-window kind that wraps its ring
    buffer; dynamic NTK, whose frequencies follow the length, under each protocol; None: the
    model as given), logits to float32 rounding, zeros past the answer, whatever the pads
    hold; one compiled program for every length."""
    model = jittered(make_model(layered([{"window": 3}, {}], depth=2)))
    run = _jitted_generate_padded()
    program = PROGRAMS[protocol or "prefill_fixed"]
    per_length = jax.jit(generate, static_argnums=(2, 3), static_argnames=("protocol", "scaling"))
    for p, steps in PADDED_CASES:
        prompt = TOKENS[:p]
        buffer = PADS.at[:p].set(prompt)
        if protocol is None:
            want_tokens, want_logits = per_length(model, prompt, steps, CAPACITY)
            encodings = None
        else:
            want_tokens, want_logits = per_length(
                model, prompt, steps, CAPACITY, protocol=protocol, scaling=DYNAMIC
            )
            encodings = step_encodings(model, DYNAMIC, protocol, p, steps, MAX_STEPS)
        lengths = jnp.asarray(p, jnp.int32), jnp.asarray(steps, jnp.int32)
        tokens, logits = run(
            model, buffer, *lengths, MAX_STEPS, program=program, encodings=encodings
        )
        np.testing.assert_array_equal(np.asarray(tokens[:steps]), np.asarray(want_tokens))
        assert (np.asarray(tokens[steps:]) == 0).all() and (np.asarray(logits[steps:]) == 0).all()
        np.testing.assert_allclose(logits[:steps], want_logits, rtol=2e-5, atol=2e-5)
    assert run._cached._cache_size() == 1


def test_padded_prefill_holds_the_prompts_cache():
    """The cache of a padded prefill equals `prefill`'s of the prompt alone, slot by slot
    (a windowed kind keeps the prompt's last `window` tokens, not the pads')."""
    model = jittered(make_model(layered([{"window": 3}, {}], depth=2)))
    padded = jax.jit(prefill_padded)
    for p in (7,):  # the window wraps: slots hold tokens 6, 4, 5
        _, want = jax.jit(prefill, static_argnums=2)(model, TOKENS[:p], CAPACITY)
        _, got = padded(model, PADS.at[:p].set(TOKENS[:p]), jnp.int32(p))
        assert int(got.length) == p
        for g, w in zip(got.layers, want.layers, strict=True):
            np.testing.assert_array_equal(g.index, w.index)
            np.testing.assert_array_equal(g.position, w.position)
            np.testing.assert_allclose(g.k, w.k, rtol=2e-5, atol=2e-6)
            np.testing.assert_allclose(g.v, w.v, rtol=2e-5, atol=2e-6)


def test_prefill_fixed_and_stale_share_one_program():
    """prefill_fixed is per_step_stale with one scaling everywhere: with the encodings as
    arguments both run in one compiled program, as do other scalings of the same shapes."""
    model = _rope_model()
    run = _jitted_generate_padded()
    buffer = PADS.at[:6].set(TOKENS[:6])
    for protocol, scaling in [
        ("prefill_fixed", DYNAMIC),
        ("per_step_stale", DYNAMIC),
        ("prefill_fixed", ("yarn", 2.0, None)),
    ]:
        enc = step_encodings(model, scaling, protocol, 6, 4, MAX_STEPS)
        run(model, buffer, jnp.int32(6), jnp.int32(4), MAX_STEPS, program="cached", encodings=enc)
    assert run._cached._cache_size() == 1
    assert {PROGRAMS[p] for p in PROTOCOLS} == {"cached", "recompute", "full"}


# Every relative-position remap at windows small enough that the 14 tokens cross them.
REMAP_PARAMS = {
    "rerope": (1.0, {"window": 3}),
    "leaky_rerope": (4.0, {"window": 3}),
    "self_extend": (2.0, {"window": 3}),
    "dual_chunk": (1.0, {"chunk_size": 5, "local_window": 2}),
    "string": (1.0, {"shift": 4, "local_window": 1}),
}


@pytest.mark.parametrize(
    "method",
    [m if m == "dual_chunk" else pytest.param(m, marks=pytest.mark.slow) for m in REMAP_PARAMS],
)
def test_a_remap_decodes_as_it_forwards(method):
    """The cache holds the keys rotated once per position set (S KV heads, here 2 or 3 x 2),
    and each cached step equals the full forward's row, with a sliding-window kind too."""
    factor, params = REMAP_PARAMS[method]
    for cfg in (trial(), layered([{"window": 4}, {}])):
        base = jittered(make_model(cfg))
        model = with_scaling(base, method, factor, params, seq_len=TOTAL)
        sets = model.encoding_of(0).sets.n_sets
        cache = init_cache(model, CAPACITY)
        assert cache.layers[0].k.shape[1] == sets * model.config.n_kv_heads
        assert_equals_teacher_forcing(model, TOKENS)
        assert np.abs(np.asarray(base(TOKENS)) - np.asarray(model(TOKENS))).max() > 1e-4

"""Empirical NTK kernels against a brute-force full-Jacobian computation, and their laws."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rope_lab.config import replace
from rope_lab.model.transformer import trainable, with_scaling
from rope_lab.ntk import kernels as ntk
from rope_lab.ntk.kernels import shift_invariance_error
from rope_lab.registry import POSITIONS, SCALINGS
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

KINDS = POSITIONS.names()  # every registered encoding
OUTPUTS = ["trace", "u", "target"]
V, N1, L1, N2, L2 = 12, 5, 8, 3, 6
RNG = np.random.default_rng(0)
T1, T2 = RNG.integers(0, V, (N1, L1)), RNG.integers(0, V, (N2, L2))
U = RNG.normal(size=V).astype(np.float32)


@functools.cache
def tiny_model(kind: str):
    """Width 16, depth 1, vocab 12; a learned table of 128 rows (room for shifts up to 100)."""
    cfg = tiny_trial(kind, width=16, depth=1, head_dim=8, vocab=V, length=L1)
    return make_model(replace(cfg, **{"model.position.max_length": 128}))


def as_output(name: str):
    return U if name == "u" else name


# compiled once or twice per model and run a few times: the least compile time
BRUTE_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


@functools.partial(eqx.filter_jit, compiler_options=BRUTE_OPTIONS)
def _logit_jacobian(params, static, tokens, positions):
    """d logits / d theta for every sequence: (N, L, V, P), theta the flattened parameters."""
    flat, unravel = ravel_pytree(params)

    def logits(theta, tok, pos):  # (L, V)
        return eqx.combine(unravel(theta), static)(tok, pos)

    with jax.default_matmul_precision("highest"):
        return jax.vmap(jax.jacrev(logits), in_axes=(None, 0, 0))(flat, tokens, positions)


def logit_jacobian(model, tokens, positions=None) -> np.ndarray:
    """Full logit Jacobian (N, L, V, P) in float64 of tokens (N, L) at positions (N, L) or (L,)
    (default 0..L-1), over the trainable (inexact, non-Frozen) leaves flattened by ravel_pytree."""
    tokens = np.asarray(tokens, np.int32)
    pos = np.arange(tokens.shape[1]) if positions is None else np.asarray(positions)
    pos = np.broadcast_to(pos, tokens.shape).astype(np.int32)
    params, static = eqx.partition(model, trainable(model))
    jac = _logit_jacobian(params, static, jnp.asarray(tokens), jnp.asarray(pos))
    return np.asarray(jac, np.float64)


def output_jacobian(J, tokens, output) -> np.ndarray:
    """Per-position outputs' Jacobian (N, L, C, P) from the logit Jacobian J (N, L, V, P), by the
    definitions: "trace" f_ic = logits_ic / sqrt(V); a vector u: f_i = <u, logits_i> / sqrt(V);
    "target": f_i = logits_{i, x_{i+1}}, and f_{L-1} = 0."""
    n, length, vocab, _ = J.shape
    if isinstance(output, str) and output == "trace":
        return J / np.sqrt(vocab)
    if not isinstance(output, str):
        u = np.asarray(output, np.float64)
        return np.einsum("nlvp,v->nlp", J, u)[:, :, None] / np.sqrt(vocab)
    assert output == "target", output
    out = np.zeros((n, length, 1, J.shape[-1]))
    for s in range(n):
        for i in range(length - 1):
            out[s, i, 0] = J[s, i, tokens[s][i + 1]]
    return out


@functools.cache
def brute_jacobian(kind: str, which: int, output: str) -> np.ndarray:
    """(N, L, C, P) in float64 for T1 (which=1) or T2 (which=2)."""
    tokens = T1 if which == 1 else T2
    return output_jacobian(_brute_logits(kind, which), tokens, as_output(output))


@functools.cache
def _brute_logits(kind: str, which: int) -> np.ndarray:
    return logit_jacobian(tiny_model(kind), T1 if which == 1 else T2)


def brute_groups(model) -> np.ndarray:
    """Group name of every flattened parameter: (P,)."""
    params = eqx.filter(model, trainable(model))
    leaves = jax.tree_util.tree_leaves_with_path(params)
    names = [ntk.param_group(jax.tree_util.keystr(p)) for p, _ in leaves]
    sizes = [leaf.size for _, leaf in leaves]
    return np.concatenate([np.full(size, name) for name, size in zip(names, sizes, strict=True)])


def seq_brute(J1, J2):
    return np.einsum("ncp,mcp->nm", J1.sum(1), J2.sum(1))


def assert_close(actual, expected, rtol=1e-5):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    scale = np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


FAST = {("rope", "trace")}  # each combination compiles ~8 functions (2-5 s each on 2 CPUs)
GRID = [
    pytest.param(kind, out, marks=() if (kind, out) in FAST else pytest.mark.slow)
    for kind in KINDS
    for out in OUTPUTS
]
CHUNK = 3  # does not divide N1 = 5; sequences per chunk, or (sequence, position) rows per chunk


@pytest.fixture
def drop_compiled():
    """Each GRID case compiles programs whose machine code XLA CPU keeps mapped (about 2000
    memory maps a case): dropped after each case, so the grid over every encoding stays below
    Linux's default 65530 maps per process (past it, XLA's compiler segfaults)."""
    yield
    jax.clear_caches()


@pytest.mark.parametrize(("kind", "out"), GRID)
@pytest.mark.usefixtures("drop_compiled")
def test_matches_bruteforce(kind, out):
    """Sequence and position kernels, L1 != L2, unchunked and chunked (chunks not dividing N)."""
    model, output = tiny_model(kind), as_output(out)
    J1, J2 = brute_jacobian(kind, 1, out), brute_jacobian(kind, 2, out)
    K = seq_brute(J1, J2)
    assert_close(ntk.sequence_kernel(model, T1, T2, output=output), K)
    assert_close(ntk.sequence_kernel(model, T1, T2, output=output, chunk_size=CHUNK), K)
    self_kernel = ntk.sequence_kernel(model, T1, T1, output=output, chunk_size=CHUNK)
    assert_close(self_kernel, seq_brute(J1, J1))
    P = np.einsum("nicp,mjcp->nmij", J1, J2)
    chunked = ntk.position_kernel(model, T1, T2, output=output, chunk_size=CHUNK)
    assert_close(chunked, P)
    assert_close(np.asarray(chunked).sum((2, 3)), K)
    if (kind, out) not in FAST:
        assert_close(ntk.position_kernel(model, T1, T2, output=output), P)
        assert_close(ntk.position_kernel(model, T1, T2, output=output, chunk_size=2 * L1 + 1), P)
    if out == "target":  # the last position has no next token: zero rows and columns
        assert np.all(P[:, :, -1, :] == 0) and np.all(P[:, :, :, -1] == 0)
        assert np.all(np.asarray(chunked)[:, :, -1, :] == 0)


def random_positions(n: int, length: int, high: int, seed: int) -> np.ndarray:
    """Sorted random subsets of [0, high), one per sequence (randomised positions): (n, length)."""
    rng = np.random.default_rng(seed)
    return np.sort([rng.choice(high, length, replace=False) for _ in range(n)], axis=1)


# Every position kind and every output kind, each output on two kinds (with FAST, rope has all
# three): one compiled feature program each; the full product is GRID (slow).
TINY = [
    ("none", "target"),
    ("learned", "trace"),
    ("sinusoidal", "u"),
    ("rope", "u"),
    ("rope", "target"),
    ("alibi", "trace"),
]


@pytest.mark.parametrize(("kind", "out"), TINY)
def test_tiny_position_kernel_matches_bruteforce(kind, out):
    """At the smallest size (width 16, depth 1, 3 sequences of 6 tokens) the position kernel,
    and the sequence kernel as its sum, equal the brute-force Jacobian's, with randomised
    positions (sorted random subsets, per sequence) on one side and 0..L-1 on the other."""
    model, output = tiny_model(kind), as_output(out)
    tokens2 = np.roll(T2, 1, axis=1)
    pos1 = random_positions(N2, L2, 40, seed=len(kind))
    J1 = output_jacobian(logit_jacobian(model, T2, pos1), T2, output)
    J2 = output_jacobian(logit_jacobian(model, tokens2), tokens2, output)
    P = np.einsum("nicp,mjcp->nmij", J1, J2)
    got = np.asarray(ntk.position_kernel(model, T2, tokens2, output=output, positions1=pos1))
    assert_close(got, P)
    assert_close(got.sum((2, 3)), seq_brute(J1, J2))
    assert np.abs(P).max() > 0
    default = np.broadcast_to(np.arange(L2), (N2, L2))
    if kind != "none":  # NoPE ignores positions; every other kind must see them
        moved = output_jacobian(logit_jacobian(model, T2, default), T2, output)
        assert np.abs(moved - J1).max() > 1e-3 * np.abs(J1).max()


def test_self_kernel_symmetric_psd():
    K = np.asarray(ntk.sequence_kernel(tiny_model("rope"), T1, T1, chunk_size=CHUNK), np.float64)
    np.testing.assert_array_equal(K, K.T)
    eig = np.linalg.eigvalsh(K)
    assert eig.min() >= -1e-5 * eig.max()


def test_groups_match_bruteforce_and_sum_to_total():
    model = tiny_model("rope")
    J1, J2 = brute_jacobian("rope", 1, "trace"), brute_jacobian("rope", 2, "trace")
    names = brute_groups(model)
    groups = ntk.sequence_kernel_groups(model, T1, T2, chunk_size=CHUNK)
    assert tuple(groups) == ntk.GROUPS
    for g in ntk.GROUPS:
        cols = names == g
        assert cols.any(), g
        assert_close(groups[g], seq_brute(J1[..., cols], J2[..., cols]))
    total = ntk.sequence_kernel(model, T1, T2, chunk_size=CHUNK)
    assert_close(sum(np.asarray(v, np.float64) for v in groups.values()), total)


def test_learned_table_is_in_the_embedding_group():
    names = brute_groups(tiny_model("learned"))
    assert (names == "embedding").sum() == V * 16 + 128 * 16


def test_param_group_paths():
    assert ntk.param_group(".embedding") == ntk.param_group(".position.table") == "embedding"
    assert ntk.param_group(".blocks.attn.k.weight") == "attention_qk"
    assert ntk.param_group(".blocks.attn.o.weight") == "attention_vo"
    assert ntk.param_group(".blocks.mlp.gate.weight") == "mlp"
    assert ntk.param_group(".blocks.mlp_norm.bias") == ntk.param_group(".final_norm.weight")
    assert ntk.param_group(".head.weight") == "head"
    with pytest.raises(ValueError, match="no parameter group"):
        ntk.param_group(".mystery")


def test_tail_plus_head_is_the_sequence_kernel():
    model, train_length = tiny_model("rope"), 5
    out = ntk.tail_kernel(model, T1, T2, train_length, output="trace", chunk_size=CHUNK)
    K = ntk.sequence_kernel(model, T1, T2, chunk_size=CHUNK)
    assert_close(np.asarray(out["tail"]) + np.asarray(out["head"]), K)
    P = np.asarray(ntk.position_kernel(model, T1, T2, chunk_size=CHUNK))
    assert_close(out["tail"], P[:, :, train_length:].sum((2, 3)))
    P11 = np.asarray(ntk.position_kernel(model, T1, T1, chunk_size=CHUNK))
    diag = np.einsum("nnij->nij", P11)
    assert_close(out["tail_sqnorm"], diag[:, train_length:, train_length:].sum((1, 2)))
    assert_close(out["head_sqnorm"], diag[:, :train_length, :train_length].sum((1, 2)))
    K22 = ntk.sequence_kernel(model, T2, T2, chunk_size=CHUNK)
    assert_close(out["short_sqnorm"], np.diag(K22))
    expected = np.asarray(out["tail"]) / np.sqrt(np.outer(out["tail_sqnorm"], out["short_sqnorm"]))
    assert_close(out["tail_cos"], expected)
    assert np.all(np.abs(np.asarray(out["head_cos"])) <= 1 + 1e-6)
    with pytest.raises(ValueError, match="train_length"):
        ntk.tail_kernel(model, T1, T2, L1)


@pytest.mark.parametrize("out", ["u", "trace"])
def test_gradient_features_match_bruteforce(out):
    """Features of masked outputs, contracted, equal the brute-force Jacobian's kernels."""
    model = tiny_model("rope")
    J1, J2 = brute_jacobian("rope", 1, out), brute_jacobian("rope", 2, out)
    masks1 = RNG.normal(size=(N1, 2, L1)).astype(np.float32)  # per-sequence masks
    f1 = ntk.gradient_features(model, T1, masks=masks1, output=as_output(out), chunk_size=CHUNK)
    f2 = ntk.gradient_features(model, T2, output=as_output(out))
    assert (f1.n, f1.rows, f2.rows) == (N1, 2, 1)
    groups = ntk.feature_kernels(f1, f2)
    expected = np.einsum("nrl,nlcp,mcp->nrm", masks1, J1, J2.sum(1))
    assert_close(ntk.total_kernel(groups).reshape(N1, 2, N2), expected, rtol=1e-4)
    names = brute_groups(model)
    for g in ntk.GROUPS:
        sel = names == g
        part = np.einsum("nrl,nlcp,mcp->nrm", masks1, J1[..., sel], J2.sum(1)[..., sel])
        assert_close(groups[g].reshape(N1, 2, N2), part, rtol=1e-4)
    head = f1.combine([[1.0, -1.0]])  # rows are linear in the masks
    K_head = ntk.total_kernel(ntk.feature_kernels(head, f2))
    assert_close(K_head, expected[:, 0] - expected[:, 1], rtol=1e-4)
    sq = np.einsum("nrl,nlcp->nrcp", masks1, J1)
    assert_close(f1.sqnorms(), np.einsum("nrcp,nrcp->nr", sq, sq), rtol=1e-4)
    with pytest.raises(ValueError, match="masks"):
        ntk.gradient_features(model, T1, masks=np.ones((2, L1 + 1)))


def test_no_retrace_per_chunk():
    model = tiny_model("rope")
    before = ntk.TRACES["features"]
    ntk.sequence_kernel(model, T1, T2, chunk_size=CHUNK)  # 2 chunks (the last one padded) x 1
    first = ntk.TRACES["features"]
    assert first - before <= 2  # at most one trace per side (new shapes)
    ntk.sequence_kernel(model, T1[::-1], T2[::-1], chunk_size=CHUNK)
    ntk.position_kernel(model, T1[::-1], T2, chunk_size=CHUNK)  # 15 + 6 passes of 3 rows
    second = ntk.TRACES["features"]
    assert second - first <= 2
    ntk.position_kernel(model, T1, T2, chunk_size=CHUNK)
    assert ntk.TRACES["features"] == second


def test_positions_default_and_broadcast():
    model = tiny_model("rope")
    base = ntk.sequence_kernel(model, T1, T2, chunk_size=CHUNK)
    pos1 = np.broadcast_to(np.arange(L1), (N1, L1))
    same = ntk.sequence_kernel(
        model, T1, T2, chunk_size=CHUNK, positions1=pos1, positions2=np.arange(L2)
    )
    np.testing.assert_array_equal(base, same)
    with pytest.raises(ValueError, match="positions"):
        ntk.sequence_kernel(model, T1, T2, positions1=np.arange(L1 + 1))
    with pytest.raises(ValueError, match="output"):
        ntk.sequence_kernel(model, T1, T2, output="logits")
    with pytest.raises(ValueError, match="output"):
        ntk.sequence_kernel(model, T1, T2, output=np.ones(V + 1))


@pytest.mark.parametrize("kind", KINDS)
def test_shift_invariance(kind):
    """The kernel is shift invariant for every encoding that declares it, and visibly not for
    position embeddings. A relative encoding that is not shift invariant (FIRE: distances
    normalised by the query position) is exactly invariant while every query is within its
    threshold (512 here); its own test pins both regimes of its bias."""
    model, options = tiny_model(kind), POSITIONS[kind]
    errors = [shift_invariance_error(model, T2, T2, tau) for tau in (1, 17, 100)]
    print(kind, errors)
    if options.shift_invariant:
        assert max(errors) < 1e-3
    elif options.family == "absolute":
        assert min(errors) > 1e-2


@pytest.mark.slow
def test_matches_vmap_free_gradients():
    """At a size where XLA CPU miscompiles some vmapped vjps: compare with plain per-example
    gradients (one jit(grad) per sequence and output, no vmap anywhere)."""
    vocab, length, n = 24, 16, 16
    model = make_model(tiny_trial("rope", width=32, depth=2, head_dim=8, vocab=vocab))
    params, static = eqx.partition(model, trainable(model))
    t1 = np.asarray(jax.random.randint(jax.random.PRNGKey(4), (n, length), 0, vocab))
    t2 = np.asarray(jax.random.randint(jax.random.PRNGKey(5), (n, length), 0, vocab))
    u = np.asarray(jax.random.normal(jax.random.PRNGKey(6), (vocab,)))

    @jax.jit
    def grad(tok, weights):  # gradient of sum_{i,c} weights_ic logits_ic(tok)
        g = jax.grad(lambda p: jnp.sum(eqx.combine(p, static)(tok) * weights))(params)
        return jnp.concatenate([leaf.ravel() for leaf in jax.tree.leaves(g)])

    def feats(tokens, weights):  # weights (R, L, V) -> (N, R, P)
        return np.asarray([[grad(tok, w) for w in weights] for tok in tokens], np.float64)

    scale = 1 / np.sqrt(vocab)
    with_u = (np.ones((length, 1)) * u * scale)[None]
    trace = np.ones((1, length, 1)) * np.eye(vocab)[:, None, :] * scale
    for output, weights in (("u", with_u), ("trace", trace)):
        f1, f2 = feats(t1, weights), feats(t2, weights)
        expected = np.einsum("nrp,mrp->nm", f1, f2)
        for chunk in (None, 7):
            value = output if output == "trace" else u
            got = ntk.sequence_kernel(model, t1, t2, output=value, chunk_size=chunk)
            assert_close(got, expected)
    rows = np.eye(length)[:, :, None] * u * scale  # (L, L, V): one position at a time
    f1, f2 = feats(t1[:4], rows), feats(t2[:3], rows)
    P = np.einsum("nip,mjp->nmij", f1, f2)
    for chunk in (None, 5):
        assert_close(ntk.position_kernel(model, t1[:4], t2[:3], output=u, chunk_size=chunk), P)


REMAPS = [k for k in SCALINGS.names() if SCALINGS[k].remaps]


@pytest.mark.slow  # ~30 s each on 2 CPUs
@pytest.mark.parametrize("method", REMAPS)
@pytest.mark.usefixtures("drop_compiled")
def test_kernel_under_a_remap_matches_bruteforce(method):
    """The NTK stage under a relative-position remap (its position sets through the rotary hook):
    sequence and position kernels equal the brute-force Jacobian of the remapped model, which
    differs from the unremapped one (window 2 and 3-token chunks at L 8)."""
    params = {
        "rerope": {"window": 2},
        "leaky_rerope": {"window": 2},
        "self_extend": {"window": 2},
        "dual_chunk": {"chunk_size": 4, "local_window": 1},
        "string": {"shift": 3, "local_window": 1},
    }[method]
    model = with_scaling(tiny_model("rope"), method, 2.0, params, seq_len=L1)
    J1, J2 = logit_jacobian(model, T1) / np.sqrt(V), logit_jacobian(model, T2) / np.sqrt(V)
    K = seq_brute(J1, J2)
    assert_close(ntk.sequence_kernel(model, T1, T2, output="trace", chunk_size=CHUNK), K)
    P = np.einsum("nicp,mjcp->nmij", J1, J2)
    assert_close(ntk.position_kernel(model, T1, T2, output="trace", chunk_size=CHUNK), P)
    plain = seq_brute(brute_jacobian("rope", 1, "trace"), brute_jacobian("rope", 2, "trace"))
    assert np.abs(K - plain).max() > 1e-4 * np.abs(plain).max()

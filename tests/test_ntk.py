"""Empirical NTK kernels against a brute-force full-Jacobian computation, and their laws."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rope_lab import ntk
from rope_lab.config import replace
from rope_lab.model import trainable
from rope_lab.ntk_metrics import shift_invariance_error
from rope_lab.train import make_model
from tests.helpers import tiny_trial

KINDS = ["none", "learned", "sinusoidal", "rope", "alibi"]
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


@eqx.filter_jit
def _jacobian(params, static, tokens, output: str, u):
    """Per-position outputs' Jacobian w.r.t. the flattened parameters: (N, L, C, P)."""
    flat, unravel = ravel_pytree(params)

    def outputs(theta, tok):  # (L, C), written independently of rope_lab.ntk
        logits = eqx.combine(unravel(theta), static)(tok)
        if output == "trace":
            return logits / np.sqrt(V)
        if output == "u":
            return (logits @ u / np.sqrt(V))[:, None]
        nxt = logits[jnp.arange(tok.shape[0] - 1), tok[1:]]
        return jnp.concatenate([nxt, jnp.zeros((1,))])[:, None]

    return jax.vmap(jax.jacrev(outputs), in_axes=(None, 0))(flat, tokens)


@functools.cache
def brute_jacobian(kind: str, which: int, output: str) -> np.ndarray:
    """(N, L, C, P) in float64 for T1 (which=1) or T2 (which=2)."""
    model = tiny_model(kind)
    params, static = eqx.partition(model, trainable(model))
    tokens = jnp.asarray(T1 if which == 1 else T2)
    return np.asarray(_jacobian(params, static, tokens, output, U), np.float64)


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


@pytest.mark.parametrize(("kind", "out"), GRID)
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
    ntk.position_kernel(model, T1[::-1], T2, chunk_size=CHUNK)  # 15 x 6 chunks of 3 rows
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


RELATIVE = {"none": True, "rope": True, "alibi": True, "learned": False, "sinusoidal": False}


@pytest.mark.parametrize("kind", KINDS)
def test_shift_invariance(kind):
    model = tiny_model(kind)
    errors = [shift_invariance_error(model, T2, T2, tau) for tau in (1, 17, 100)]
    print(kind, errors)
    if RELATIVE[kind]:
        assert max(errors) < 1e-3
    else:
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

"""The causal convolutional model (`model.family: cnn`): the convolution against a NumPy
transcription, causality, the receptive field to the token, exact shift-equivariance of the
outputs and of the empirical NTK, and the NTK against a brute-force `jacrev`."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import TrialConfig, from_dict, validate
from rope_lab.model.cnn import CNN, CausalConv
from rope_lab.model.layers import Linear
from rope_lab.ntk import kernels as ntk
from rope_lab.trial.train import make_model
from tests.helpers import ntk_against_jacrev

V = 12


def cnn_trial(width=16, depth=3, kernel_size=3, dilations=(1, 2, 4), **model) -> TrialConfig:
    """A tiny CNN trial (passkey, vocabulary V, L_train 32)."""
    cnn = {"kernel_size": kernel_size, "dilations": list(dilations)}
    model = {"family": "cnn", "width": width, "depth": depth, "cnn": cnn, **model}
    task = {"vocab_size": V, "params": {"num_digits": 4, "needle_length": 2}}
    data = {"model": model, "task": task, "train": {"length": 32}}
    return validate(from_dict(TrialConfig, data))


@functools.cache
def tiny_cnn(depth=3, kernel_size=3, dilations=(1, 2, 4), norm="layernorm", mlp="swiglu") -> CNN:
    cfg = cnn_trial(depth=depth, kernel_size=kernel_size, dilations=dilations, norm=norm, mlp=mlp)
    return make_model(cfg)


def conv_numpy(x: np.ndarray, weight: np.ndarray, k: int, d: int) -> np.ndarray:
    """Causal dilated convolution by its definition, in float64 loops: x (L, C), weight
    (C_out, k C) whose block j (columns j C .. (j + 1) C) multiplies the token (k - 1 - j) d
    positions back; tokens before the first are zero."""
    length, c = x.shape
    y = np.zeros((length, weight.shape[0]))
    for t in range(length):
        for back in range(k):  # `back` taps before t, each d apart
            s = t - back * d
            if s < 0:
                continue
            block = weight[:, (k - 1 - back) * c : (k - back) * c]
            for o in range(weight.shape[0]):
                for i in range(c):
                    y[t, o] += block[o, i] * x[s, i]
    return y


@pytest.mark.parametrize(("k", "d"), [(3, 1), (2, 3), (4, 2), (1, 5)])
def test_conv_is_the_numpy_transcription(k, d):
    """On random weights and inputs (L 11, 5 channels), batched and single, to float32."""
    rng = np.random.default_rng(k * 10 + d)
    c, length = 5, 11
    weight = rng.normal(size=(c, k * c)).astype(np.float32)
    linear = Linear(k * c, c, init_std=1.0, multiplier=1.0, key=jax.random.PRNGKey(0))
    conv = CausalConv(eqx.tree_at(lambda lin: lin.weight, linear, jnp.asarray(weight)), k, d)
    x = rng.normal(size=(3, length, c)).astype(np.float32)
    with jax.default_matmul_precision("highest"):
        got = np.asarray(conv(jnp.asarray(x)))
        single = np.asarray(conv(jnp.asarray(x[1])))
    for b in range(3):
        np.testing.assert_allclose(got[b], conv_numpy(x[b], weight, k, d), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(single, got[1], rtol=1e-6, atol=1e-6)


def test_receptive_field_of_the_config_and_the_model():
    """R = 1 + (k - 1) sum_l d_l, the dilations cycling through the depth."""
    assert cnn_trial(depth=3).model.receptive_field == 1 + 2 * (1 + 2 + 4) == 15
    assert cnn_trial(depth=5, dilations=(1, 2)).model.receptive_field == 1 + 2 * 7 == 15
    assert cnn_trial(depth=2, kernel_size=5, dilations=(3,)).model.receptive_field == 25
    assert tiny_cnn().receptive_field == 15
    assert [b.conv.dilation for b in tiny_cnn(depth=4, dilations=(1, 2)).blocks] == [1, 2, 1, 2]
    assert TrialConfig().model.receptive_field is None  # attention sees the whole prefix


def _logits(model, tokens) -> np.ndarray:
    return np.asarray(model(jnp.asarray(tokens, jnp.int32)))


def test_causal():
    """Output t is unchanged, bit for bit, when any token after t changes."""
    model = tiny_cnn()
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, V, 24)
    base = _logits(model, tokens)
    for t in (0, 5, 14, 22):
        changed = tokens.copy()
        changed[t + 1 :] = (changed[t + 1 :] + 1 + rng.integers(0, V - 1, 23 - t)) % V
        out = _logits(model, changed)
        np.testing.assert_array_equal(out[: t + 1], base[: t + 1])
        assert np.abs(out[t + 1 :] - base[t + 1 :]).max() > 1e-3


@pytest.mark.parametrize("dilations", [(1, 2, 4), (3, 1, 2)])
def test_output_sees_exactly_the_receptive_field(dilations):
    """Changing the token R - 1 positions back changes output t; R back leaves it bit-exact."""
    model = tiny_cnn(dilations=dilations)
    r = model.receptive_field
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, V, 2 * r + 2)
    base = _logits(model, tokens)
    for t in (r - 1, r, 2 * r + 1):
        inside, outside = tokens.copy(), tokens.copy()
        inside[t - (r - 1)] = (inside[t - (r - 1)] + 1) % V
        assert np.abs(_logits(model, inside)[t] - base[t]).max() > 1e-4
        if t - r >= 0:
            outside[t - r] = (outside[t - r] + 1) % V
            np.testing.assert_array_equal(_logits(model, outside)[t], base[t])


def test_outputs_are_shift_equivariant_where_the_window_is_inside():
    """x2 = z[c : c + L], x1 = z[:L]: f_t(x2) = f_{t + c}(x1) wherever x2's window of t lies
    inside it (t >= R - 1), to float32 rounding (the same arithmetic on other rows of one
    matmul); nearer the start the zero padding shows (visibly different). Positions are
    ignored: any offset gives the same logits."""
    model = tiny_cnn()
    r, c, length = model.receptive_field, 5, 28
    z = np.random.default_rng(3).integers(0, V, length + c)
    x1, x2 = z[:length], z[c : c + length]
    f1, f2 = _logits(model, x1), _logits(model, x2)
    np.testing.assert_allclose(f2[r - 1 : length - c], f1[r - 1 + c :], rtol=1e-5, atol=1e-5)
    assert np.abs(f2[: r - 1] - f1[c : r - 1 + c]).max() > 1e-2
    moved = np.asarray(model(jnp.asarray(x1), jnp.arange(length) + 1000))
    np.testing.assert_array_equal(moved, f1)


def test_ntk_is_shift_equivariant_where_the_window_is_inside():
    """The position kernel of shifted windows of the same streams: Theta_{t,t'}(x2, x2') =
    Theta_{t+c,t'+c}(x1, x1') for t, t' >= R - 1, relative error < 1e-5; the tracker's
    shift-invariance error (positions offset) is exactly 0. Depth 2, dilations (1, 2): R = 7."""
    model = tiny_cnn(depth=2, dilations=(1, 2))
    r, c, length = model.receptive_field, 3, 12
    assert r == 7
    z = np.random.default_rng(4).integers(0, V, (2, length + c))
    x1, x2 = z[:, :length], z[:, c : c + length]
    u = np.random.default_rng(5).normal(size=V).astype(np.float32)
    p1 = np.asarray(ntk.position_kernel(model, x1, x1, output=u), np.float64)
    p2 = np.asarray(ntk.position_kernel(model, x2, x2, output=u), np.float64)
    inside = slice(r - 1, length - c)
    want, got = p1[:, :, r - 1 + c :, r - 1 + c :], p2[:, :, inside, inside]
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
    edge = np.abs(p2[:, :, : r - 1, : r - 1] - p1[:, :, c : r - 1 + c, c : r - 1 + c]).max()
    assert edge > 1e-3 * np.abs(want).max()  # the padded start is not shifted
    assert ntk.shift_invariance_error(model, x1, x1, 17, output=u) == 0.0


def test_ntk_matches_jacrev_and_groups_sum_to_it():
    """The sequence kernel equals the brute-force `jacrev` kernel (the convolutions' columns
    needed); its groups are embedding, conv, mlp, norms, head, each its columns' kernel."""
    model = tiny_cnn(depth=2, dilations=(1, 2))
    tokens = np.random.default_rng(6).integers(0, V, (3, 10))
    per_seq, _, columns = ntk_against_jacrev(
        model, tokens, lambda m: m.blocks[1].conv.linear.weight
    )
    groups = ntk.sequence_kernel_groups(model, tokens, tokens)
    assert tuple(groups) == ("embedding", "conv", "mlp", "norms", "head")
    selections = {
        "embedding": lambda m: m.embedding,
        "conv": lambda m: [b.conv.linear.weight for b in m.blocks],
        "mlp": lambda m: [x.weight for b in m.blocks for x in (b.mlp.up, b.mlp.down, b.mlp.gate)],
        "norms": lambda m: [
            x
            for n in [*[n for b in m.blocks for n in (b.conv_norm, b.mlp_norm)], m.final_norm]
            for x in (n.weight, n.bias)
        ],
        "head": lambda m: m.head.weight,
    }
    for name, select in selections.items():
        own = per_seq[..., columns(select)]
        want = np.einsum("ncp,mcp->nm", own, own)
        got = np.asarray(groups[name], np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("parametrization", ["sp", "ntk", "mup"])
def test_batched_call_equals_vmap_and_every_parametrization_runs(parametrization):
    cfg = cnn_trial(parametrization=parametrization, norm="rmsnorm")
    model = make_model(cfg)
    tokens = jnp.asarray(np.random.default_rng(7).integers(0, V, (3, 9)), jnp.int32)
    out = model(tokens)
    assert out.shape == (3, 9, V) and out.dtype == jnp.float32
    np.testing.assert_allclose(out, jax.vmap(model)(tokens), rtol=1e-5, atol=1e-5)
    conv = model.blocks[0].conv.linear
    assert conv.weight.shape == (16, 3 * 16)
    if parametrization == "ntk":
        assert conv.multiplier == (3 * 16) ** -0.5

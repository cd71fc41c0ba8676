"""Empirical neural tangent kernels of the Transformer, from per-example gradients.

Parameters are the trainable inexact leaves (`model.trainable`); Frozen buffers are excluded.
For one sequence x of length L with logits (L, V), the per-position outputs f_i(x) are set by
`output`:

- an array `u` (V,): f_i = <u, logits_i> / sqrt(V) (one output);
- `"target"`: f_i = logits_{i, x_{i+1}}, the next-token logit. The last position has no next
  token and is left out: f_{L-1} = 0, so its rows and columns of the position kernel are 0;
- `"trace"`: the V outputs f_{i,c} = logits_{i,c}; every kernel is averaged over c (1/V sum_c).

Kernels: sequence Theta(x, x') = <grad F(x), grad F(x')> with F = sum_i f_i, shape (N1, N2);
position Theta_ij(x, x') = <grad f_i(x), grad f_j(x')>, shape (N1, N2, L1, L2), whose sum over
(i, j) is the sequence kernel. The model has no stochastic layers, so its forward pass is the
deterministic one; everything runs under `jax.default_matmul_precision("highest")`.

Method (one engine for every kernel). Each sequence has R position masks m_r (L,) (sequence
kernel: R = 1, all ones; position kernel: one-hot rows; tail kernel: R = 2, all and tail). One
forward pass per sequence and `jax.jacrev` of the (R, C) outputs y_rc = sum_i m_ri f_{i,c}
(C = V for "trace", else 1) give its gradient features, R * C backward passes sharing one
forward, vmapped over a chunk of sequences (the last chunk padded, so every chunk runs one
compiled program) and flattened per leaf to (R, C p_leaf): `gradient_features`. The features
are kept on the host, N R C P float32 per side; a kernel is the sum over leaves of G_a G_b^T
(float32 BLAS matmuls summed in float64), split by parameter group: `feature_kernels`. Equal
arguments compute their features once and give an exactly symmetric kernel. A position kernel
with `chunk_size` < L runs each sequence once per block of `chunk_size` one-hot masks.
`chunk_size` bounds the device memory of one gradient pass; the host keeps every feature.

Kernel timings on this project's shared 2-core CPU: benchmarks/RESULTS.md, "Figures moved from
rope_lab's docstrings". The host matmuls are multithreaded OpenBLAS: on an oversubscribed
machine one contraction occasionally stalls (not with OPENBLAS_NUM_THREADS=1). Leaf-wise
contraction ties one flattened Jacobian J1 J2^T and never concatenates P-long rows; NTK-vector
products (vjp, then jvp per column) were much slower. Caution: on this jax/XLA CPU
build, `jit(vmap(vjp))` of an already batched function is miscompiled for large intermediates
(per-cotangent gradients off by ~30%). This module vmaps single-example `jacrev`s; the slow test
`test_matches_vmap_free_gradients` checks it against gradients taken without vmap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from rope_lab.model.transformer import trainable
from rope_lab.ntk.metrics import cosine, relative_change
from rope_lab.ntk.outputs import masked_outputs, output_spec

GROUPS = ("embedding", "attention_qk", "attention_vo", "mlp", "norms", "head")  # a Transformer's
# every group of every model family, in kernel order: a CNN (`model.cnn`) has conv, no attention
ALL_GROUPS = ("embedding", "attention_qk", "attention_vo", "conv", "mlp", "norms", "head")
TRACES = {"features": 0}  # trace counter of the jitted feature function (retracing guard)


def param_group(path: str) -> str:
    """Group of a parameter path such as `.blocks.attn.q.weight` (one of GROUPS)."""
    parts = [p for p in path.replace("[", ".").replace("]", "").split(".") if p]
    if any(p.endswith("norm") for p in parts):
        return "norms"
    if parts and parts[0] in ("embedding", "position", "layer_positions"):
        return "embedding"
    if "attn" in parts:
        after = parts[parts.index("attn") + 1 : parts.index("attn") + 2]
        # Scalable-Softmax's s scales q . k; an attention variant's arrays (sinks) and a forget
        # gate act on it
        if after in (["q"], ["k"], ["ssmax"], ["variant"], ["forget"]):
            return "attention_qk"
        if after in (["v"], ["o"], ["gate"]):  # an output gate scales what v carries
            return "attention_vo"
    if "mlp" in parts:
        return "mlp"
    if "conv" in parts:
        return "conv"
    if parts and parts[0] == "head":
        return "head"
    raise ValueError(
        f"ntk: no parameter group for {path!r}; extend rope_lab.ntk.kernels.param_group"
    )


def _leaf_groups(params: eqx.Module) -> tuple[str, ...]:
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return tuple(param_group(jax.tree_util.keystr(path)) for path, _ in leaves)


@eqx.filter_jit
def _features(params, static, tokens, positions, masks, kind: str, u) -> list[Array]:
    """Gradient features of a chunk: tokens/positions (B, L), masks (B, R, L) -> one
    (B R, C p_leaf) array per leaf, then the outputs y (B R, C) themselves."""
    TRACES["features"] += 1
    batch, rows = masks.shape[:2]

    def one(tok, pos, m):
        def out(p):
            y = masked_outputs(eqx.combine(p, static)(tok, pos), tok, m, kind, u)
            return y, y

        # leaves (R, C, *shape): one forward, R C backward passes; y (R, C) from that forward
        jac, y = jax.jacrev(out, has_aux=True)(params)
        return [leaf.reshape(rows, -1) for leaf in jax.tree.leaves(jac)] + [y]

    return [f.reshape(batch * rows, -1) for f in jax.vmap(one)(tokens, positions, masks)]


@dataclass(frozen=True)
class GradientFeatures:
    """Gradient features of N sequences x R output masks, computed once and contracted often.

    `leaves[k]` is a host float32 array (N R, C p_k) for parameter leaf k (row n R + r: sequence
    n, mask r; C = V for "trace", else 1), `groups[k]` its parameter group; `values` (N R, C)
    the outputs F_r themselves (None where not computed). Rows are linear in the masks, so
    `combine` gives features of other masks (e.g. head = all - tail) without new gradients.
    Contractions are BLAS matmuls on the host: no per-shape XLA compilations.
    """

    leaves: tuple[np.ndarray, ...]
    groups: tuple[str, ...]
    n: int
    rows: int
    values: np.ndarray | None = None

    def combine(self, weights) -> GradientFeatures:
        """Features of new masks sum_r w_{r'r} m_r: weights (R', R) -> (N R', ...) features."""
        w = np.asarray(weights, np.float32)
        mixed = [
            np.einsum("sr,nrp->nsp", w, leaf.reshape(self.n, self.rows, -1)).reshape(
                self.n * w.shape[0], -1
            )
            for leaf in (*self.leaves, *([] if self.values is None else [self.values]))
        ]
        values = None if self.values is None else mixed.pop()
        return GradientFeatures(tuple(mixed), self.groups, self.n, w.shape[0], values)

    def sqnorms(self) -> np.ndarray:
        """Squared feature norms (N, R), i.e. the kernel's diagonal Theta(row, row)."""
        total = sum(np.einsum("ij,ij->i", leaf, leaf) for leaf in self.leaves)
        return np.asarray(total).reshape(self.n, self.rows)

    def unblock(self, n: int, rows: int) -> GradientFeatures:
        """Features of `row_blocks` copies (n B sequences x b rows) as n sequences x `rows` rows
        (the zero padding rows of the last block dropped; `values` not kept)."""
        kept = (leaf.reshape(n, -1, leaf.shape[1])[:, :rows] for leaf in self.leaves)
        return GradientFeatures(tuple(x.reshape(n * rows, -1) for x in kept), self.groups, n, rows)


def row_blocks(
    tokens, masks: np.ndarray, rows: int, positions=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Each sequence copied once per block of `rows` of its R masks, so that one gradient pass
    sees `rows` masks: tokens (N, L), masks (R, L) -> tokens (N B, L), masks (N B, rows, L),
    positions (N B, L) (None stays None), with B = ceil(R / rows). `unblock(N, R)` undoes it."""
    tok = np.asarray(tokens)
    n, r = tok.shape[0], masks.shape[0]
    blocks = -(-r // rows)
    padded = np.zeros((blocks * rows, masks.shape[1]), np.float32)
    padded[:r] = masks
    pos = None if positions is None else np.repeat(_as_positions(tok, positions), blocks, 0)
    return np.repeat(tok, blocks, 0), np.tile(padded.reshape(blocks, rows, -1), (n, 1, 1)), pos


def _as_tokens(tokens) -> np.ndarray:
    tok = np.asarray(tokens).astype(np.int32)
    if tok.ndim != 2:
        raise ValueError(f"tokens: expected shape (N, L), got {tok.shape}")
    return tok


def _as_positions(tokens: np.ndarray, positions) -> np.ndarray:
    n, length = tokens.shape
    if positions is None:
        return np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy()
    pos = np.asarray(positions).astype(np.int32)
    if pos.shape == (length,):
        return np.broadcast_to(pos[None, :], (n, length)).copy()
    if pos.shape != (n, length):
        raise ValueError(f"positions: expected ({length},) or ({n}, {length}), got {pos.shape}")
    return pos


def gradient_features(
    model, tokens, *, masks=None, output="trace", positions=None, chunk_size: int | None = None
) -> GradientFeatures:
    """Per-example gradients of F_r(x) = sum_i m_ri f_i(x) for tokens (N, L): (N R, C p) rows,
    and the outputs F_r(x) themselves (`values`, (N R, C), from the same forward pass).

    `masks` (R, L) shared by every sequence or (N, R, L) per sequence (default: one all-ones
    mask, the sequence kernel's F); positions (L,) or (N, L) (default 0..L-1). One forward and
    R C backward passes per sequence, in chunks of `chunk_size` sequences (the last chunk is
    padded, so every chunk runs one compiled program). Memory: N R C P floats are kept.
    """
    tok = _as_tokens(tokens)
    n, length = tok.shape
    pos = _as_positions(tok, positions)
    m = np.ones((1, length), np.float32) if masks is None else np.asarray(masks, np.float32)
    if m.ndim == 2:
        m = np.broadcast_to(m, (n, *m.shape))
    if m.ndim != 3 or m.shape[0] != n or m.shape[2] != length:
        raise ValueError(f"masks: expected (R, {length}) or ({n}, R, {length}), got {m.shape}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    kind, u = output_spec(model, output)
    params, static = eqx.partition(model, trainable(model))
    b = n if chunk_size is None else min(chunk_size, n)
    parts = []
    with jax.default_matmul_precision("highest"):
        for start in range(0, n, b):
            seq = np.minimum(np.arange(start, start + b), n - 1)  # pad: same shape, no retrace
            args = (jnp.asarray(tok[seq]), jnp.asarray(pos[seq]), jnp.asarray(m[seq]))
            feats = _features(params, static, *args, kind, u)
            keep = min(b, n - start) * m.shape[1]
            parts.append([np.asarray(f)[:keep] for f in feats])
    *leaves, values = (np.concatenate(column) for column in zip(*parts, strict=True))
    return GradientFeatures(tuple(leaves), _leaf_groups(params), n, m.shape[1], values)


def model_groups(groups: tuple[str, ...]) -> tuple[str, ...]:
    """The kernel groups of a model whose leaves are in `groups`, in ALL_GROUPS order: GROUPS
    for a Transformer (it has every one), embedding, conv, mlp, norms, head for a CNN."""
    return tuple(g for g in ALL_GROUPS if g in groups)


def feature_kernels(a: GradientFeatures, b: GradientFeatures) -> dict[str, np.ndarray]:
    """Per-group kernels (N1 R1, N2 R2) float32 between two feature sets, keyed by
    `model_groups` (GROUPS for a Transformer); the groups sum to the total.
    `feature_kernels(a, a)` is exactly symmetric."""
    shape = (a.n * a.rows, b.n * b.rows)
    out = {g: np.zeros(shape, np.float64) for g in model_groups(a.groups)}
    for group, x, y in zip(a.groups, a.leaves, b.leaves, strict=True):
        out[group] += x @ y.T
    kernels = {g: k.astype(np.float32) for g, k in out.items()}
    return {g: (k + k.T) / 2 for g, k in kernels.items()} if b is a else kernels


def total_kernel(groups: dict[str, np.ndarray]) -> np.ndarray:
    """Sum of per-group kernels (any common shape), in `model_groups` order (a TOTAL entry
    among them is not summed)."""
    first, *rest = model_groups(tuple(groups))
    total = groups[first]
    for g in rest:
        total = total + groups[g]
    return total


def _pair(tokens1, tokens2, positions1, positions2, features):
    """`features(tokens, positions=...)` of both arguments, computed once when they are equal
    (the kernel is then exactly symmetric)."""
    tok1, tok2 = _as_tokens(tokens1), _as_tokens(tokens2)
    pos1, pos2 = _as_positions(tok1, positions1), _as_positions(tok2, positions2)
    f1 = features(tok1, positions=pos1)
    same = tok1.shape == tok2.shape and np.array_equal(tok1, tok2) and np.array_equal(pos1, pos2)
    return f1, f1 if same else features(tok2, positions=pos2)


def _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size):
    features = functools.partial(gradient_features, model, output=output, chunk_size=chunk_size)
    return feature_kernels(*_pair(tokens1, tokens2, positions1, positions2, features))


def sequence_kernel_groups(
    model,
    tokens1,
    tokens2,
    *,
    output="trace",
    positions1=None,
    positions2=None,
    chunk_size: int | None = None,
) -> dict[str, jax.Array]:
    """Sequence kernel (N1, N2) of tokens1 (N1, L1), tokens2 (N2, L2) split by parameter group
    (GROUPS); the groups sum to the total.

    Groups: embedding (token embedding and any learned position table), attention_qk,
    attention_vo, mlp, norms, head; a CNN's embedding, conv, mlp, norms, head. `chunk_size`
    counts sequences per gradient pass.
    """
    groups = _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size)
    return {g: jnp.asarray(k) for g, k in groups.items()}


def sequence_kernel(
    model, tokens1, tokens2, *, output="trace", positions1=None, positions2=None, chunk_size=None
) -> jax.Array:
    """Theta(x, x') = <grad F(x), grad F(x')> for tokens1 (N1, L1), tokens2 (N2, L2) -> (N1, N2).

    `chunk_size` counts sequences per gradient pass (None: each side in one pass). A call with
    equal arguments (Theta(D, D)) computes the features once and is exactly symmetric.
    Example: `K_train = sequence_kernel(model, short, short, output=u, chunk_size=16)`.
    """
    groups = _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size)
    return jnp.asarray(total_kernel(groups))


def _position_features(model, tokens, *, positions, output, chunk_size) -> GradientFeatures:
    """Features of every position's output f_i: tokens (N, L) -> N x L rows; `chunk_size`
    counts (sequence, position) rows per gradient pass."""
    n, length = tokens.shape
    eye = np.eye(length, dtype=np.float32)
    if chunk_size is None or chunk_size >= length:
        per_pass = None if chunk_size is None else chunk_size // length
        return gradient_features(
            model, tokens, masks=eye, output=output, positions=positions, chunk_size=per_pass
        )
    copies, masks, pos = row_blocks(tokens, eye, chunk_size, positions)
    feats = gradient_features(
        model, copies, masks=masks, output=output, positions=pos, chunk_size=1
    )
    return feats.unblock(n, length)


def position_kernel(
    model, tokens1, tokens2, *, output="trace", positions1=None, positions2=None, chunk_size=None
) -> jax.Array:
    """Theta_ij(x, x') = <grad f_i(x), grad f_j(x')> for tokens1 (N1, L1), tokens2 (N2, L2)
    -> (N1, N2, L1, L2).

    `chunk_size` counts (sequence, position) rows per gradient pass; rows of one sequence in a
    pass share its forward pass. Costs N L backward passes per side (times V for "trace").
    """
    n1, l1 = np.shape(tokens1)
    n2, l2 = np.shape(tokens2)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    features = functools.partial(_position_features, model, output=output, chunk_size=chunk_size)
    pair = _pair(tokens1, tokens2, positions1, positions2, features)
    total = total_kernel(feature_kernels(*pair))
    return jnp.asarray(total.reshape(n1, l1, n2, l2).transpose(0, 2, 1, 3))


def cross_tail_kernels(
    long: GradientFeatures, short: GradientFeatures, short_sq=None
) -> dict[str, Any]:
    """Kernels of long probes' outputs F and F_tail (positions >= L_train) against short probes.

    `long`: features with rows (F, F_tail) per probe, N_long x 2; `short`: N_short x 1, with
    Theta(x, x) `short_sq` (N_short,) (default: its squared feature norms). Returns "groups"
    (per group) and "cross" (total) <grad F(x_long), grad F(x_short)>, "tail" and "head" the
    same for F_tail and F_head = F - F_tail (N_long, N_short); squared norms "long_sqnorm",
    "tail_sqnorm", "head_sqnorm" (N_long,), "short_sqnorm" (N_short,); and the cosines
    "tail_cos", "head_cos" (N_long, N_short), 0 where a norm is 0.
    """
    groups = {g: k.reshape(long.n, 2, -1) for g, k in feature_kernels(long, short).items()}
    total = total_kernel(groups)
    cross, tail = total[:, 0], total[:, 1]
    sq = long.sqnorms()
    head_sq = long.combine([[1.0, -1.0]]).sqnorms()[:, 0]
    short_sq = short.sqnorms()[:, 0] if short_sq is None else np.asarray(short_sq)
    return {
        "groups": {g: k[:, 0] for g, k in groups.items()},
        "cross": cross,
        "tail": tail,
        "head": cross - tail,
        "long_sqnorm": sq[:, 0],
        "tail_sqnorm": sq[:, 1],
        "head_sqnorm": head_sq,
        "short_sqnorm": short_sq,
        "tail_cos": cosine(tail, sq[:, 1], short_sq),
        "head_cos": cosine(cross - tail, head_sq, short_sq),
    }


def tail_kernel(
    model,
    long_tokens,
    short_tokens,
    train_length: int,
    *,
    output="trace",
    positions_long=None,
    positions_short=None,
    chunk_size=None,
) -> dict[str, jax.Array]:
    """Kernels of the unseen positions i >= train_length of long probes (N_long, L_long)
    against short probes (N_short, L_short).

    F_tail(x) = sum_{i >= train_length} f_i(x), F_head = sum_{i < train_length} f_i(x), so
    F_tail + F_head = F. Returns "tail" and "head" = <grad F_tail|head(x_long), grad F(x_short)>
    (N_long, N_short), their cosines "tail_cos", "head_cos" (divided by the two gradient norms;
    0 where a norm is 0), and the squared norms "tail_sqnorm", "head_sqnorm" (N_long,),
    "short_sqnorm" (N_short,). `chunk_size` counts sequences per gradient pass.
    """
    l_long = np.shape(long_tokens)[1]
    if not 0 < train_length < l_long:
        raise ValueError(f"train_length: must be in (0, {l_long}), got {train_length}")
    tail = (np.arange(l_long) >= train_length).astype(np.float32)
    kw = {"output": output, "chunk_size": chunk_size}
    masks = np.stack([np.ones_like(tail), tail])
    long = gradient_features(model, long_tokens, masks=masks, positions=positions_long, **kw)
    short = gradient_features(model, short_tokens, positions=positions_short, **kw)
    out = cross_tail_kernels(long, short)
    keys = ("tail", "head", "tail_cos", "head_cos", "tail_sqnorm", "head_sqnorm", "short_sqnorm")
    return {k: jnp.asarray(out[k]) for k in keys}


def shift_invariance_error(
    model, tokens1, tokens2, tau: int, *, positions1=None, positions2=None, **kw
) -> float:
    """|Theta(x_tau, x'_tau) - Theta(x, x')|_F / |Theta(x, x')|_F, positions offset by tau.

    tokens1 (N1, L1), tokens2 (N2, L2); positions default to arange(L); `kw` go to
    `sequence_kernel` (output, chunk_size). A learned table must have >= max position + tau rows.
    """
    p1 = np.arange(np.shape(tokens1)[1]) if positions1 is None else np.asarray(positions1)
    p2 = np.arange(np.shape(tokens2)[1]) if positions2 is None else np.asarray(positions2)
    base = sequence_kernel(model, tokens1, tokens2, positions1=p1, positions2=p2, **kw)
    shifted = sequence_kernel(
        model, tokens1, tokens2, positions1=p1 + tau, positions2=p2 + tau, **kw
    )
    return relative_change(shifted, base)


__all__ = [
    "ALL_GROUPS",
    "GROUPS",
    "GradientFeatures",
    "cross_tail_kernels",
    "feature_kernels",
    "gradient_features",
    "model_groups",
    "param_group",
    "position_kernel",
    "row_blocks",
    "sequence_kernel",
    "sequence_kernel_groups",
    "shift_invariance_error",
    "tail_kernel",
    "total_kernel",
]

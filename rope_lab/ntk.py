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

Method. For a chunk of B sequences, each with R position masks m_r (L,) (sequence kernel: R = 1,
all ones; position kernel: one-hot rows; tail kernel: R = 2, tail and head), one forward pass per
sequence and `jax.jacrev` of the (R, C) outputs y_rc = sum_i m_ri f_{i,c} (C = V for "trace",
else 1) give the gradient features, R * C backward passes sharing one forward, vmapped over the
chunk and flattened per leaf to (B R, C p_leaf). A kernel block is then sum over leaves of
G_a G_b^T (a float32 matmul at HIGHEST precision); per-group kernels are the same sums split by
parameter group. Memory: two chunks of features, chunk x R x C x P floats each. With chunks the
features of the second argument are recomputed for every chunk of the first (n1 + n1 n2 chunk
evaluations; a symmetric call Theta(D, D) computes only the upper blocks); `chunk_size=None`
computes each side once, all at once. "trace" costs V backward passes per sequence.

Measured on this project's shared 2-core CPU (rope, width 64, depth 2, V = 24, L = 16,
N1 = N2 = 32, P = 102k; compiled; median (min) of 7 runs; the load from other jobs varied):

| sequence kernel, output u                           | ms          |
| this method, unchunked                              | 69 (55)     |
| this method, chunk_size 8 / 4 (side 2 recomputed)   | 120 / 275   |
| symmetric Theta(D, D), chunk_size 8                 | 70 (63)     |
| one flattened Jacobian (ravel_pytree), J1 J2^T      | 68 (65)     |
| NTK-vector products (vjp, then jvp per column)      | 785 (686)   |
| output "trace": jacrev, 1 forward + V backward      | 1005 (823)  |
| "trace": vmap over c of grad (V fwd + V bwd)        | 1238 (1174) |
| "trace": flattened Jacobian                         | 1389 (1037) |
| position kernel 4x16 by 4x16, u: shared forward     | 92 (71)     |
| the same with one forward per (sequence, position)  | 99 (91)     |

At width 32, N = 16 the order is the same (NTK-vector products 6x slower). Leaf-wise
contraction ties the flattened Jacobian and never concatenates P-long rows. Caution: on this
jax/XLA CPU build, `jit(vmap(vjp))` of an already batched function is miscompiled for large
intermediates (per-cotangent gradients off by ~30%); vmapping the NTK-vector products over
columns hits it, so they were timed with `lax.map`. This module vmaps single-example `jacrev`s;
the slow test `test_matches_vmap_free_gradients` checks it against gradients taken without vmap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rope_lab.model import trainable

GROUPS = ("embedding", "attention_qk", "attention_vo", "mlp", "norms", "head")
TRACES = {"features": 0}  # trace counter of the jitted feature function (retracing guard)


def param_group(path: str) -> str:
    """Group of a parameter path such as `.blocks.attn.q.weight` (one of GROUPS)."""
    parts = [p for p in path.replace("[", ".").replace("]", "").split(".") if p]
    if any(p.endswith("norm") for p in parts):
        return "norms"
    if parts and parts[0] in ("embedding", "position"):
        return "embedding"
    if "attn" in parts:
        after = parts[parts.index("attn") + 1 : parts.index("attn") + 2]
        if after in (["q"], ["k"]):
            return "attention_qk"
        if after in (["v"], ["o"]):
            return "attention_vo"
    if "mlp" in parts:
        return "mlp"
    if parts and parts[0] == "head":
        return "head"
    raise ValueError(f"ntk: no parameter group for {path!r}; extend rope_lab.ntk.param_group")


def _leaf_groups(params: eqx.Module) -> tuple[str, ...]:
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return tuple(param_group(jax.tree_util.keystr(path)) for path, _ in leaves)


def _output_spec(model, output) -> tuple[str, Array | None]:
    if isinstance(output, str):
        if output not in ("trace", "target"):
            raise ValueError(f"output: expected 'trace', 'target' or a (V,) array, got {output!r}")
        return output, None
    u = jnp.asarray(output, jnp.float32)
    if u.shape != (model.vocab_size,):
        raise ValueError(f"output: u must have shape ({model.vocab_size},), got {u.shape}")
    return "vector", u


def _outputs(
    logits: Float[Array, "L V"], tokens: Array, masks: Float[Array, "R L"], kind: str, u
) -> Float[Array, "R C"]:
    """Masked sums of the per-position outputs: (R, V) for "trace", else (R, 1)."""
    scale = 1.0 / math.sqrt(logits.shape[-1])
    if kind == "trace":
        return (masks @ logits) * scale
    if kind == "vector":
        return ((masks @ logits) @ u * scale)[:, None]
    following = jnp.sum(logits[:-1] * jax.nn.one_hot(tokens[1:], logits.shape[-1]), axis=1)
    return (masks[:, :-1] @ following)[:, None]


@eqx.filter_jit
def _features(params, static, tokens, positions, masks, kind: str, u, with_norms: bool):
    """Gradient features of a chunk and, if asked, their squared row norms.

    tokens/positions (B, L), masks (B, R, L) -> ([(B R, C p_leaf) per leaf], (B R,) or None).
    The norms are one more pass over all features, so only callers that use them ask.
    """
    TRACES["features"] += 1
    batch, rows = masks.shape[:2]

    def one(tok, pos, m):
        def out(p):
            return _outputs(eqx.combine(p, static)(tok, pos), tok, m, kind, u)

        jac = jax.jacrev(out)(params)  # leaves (R, C, *shape): one forward, R C backward passes
        return [leaf.reshape(rows, -1) for leaf in jax.tree.leaves(jac)]

    feats = [f.reshape(batch * rows, -1) for f in jax.vmap(one)(tokens, positions, masks)]
    return feats, sum(jnp.sum(f * f, axis=1) for f in feats) if with_norms else None


@eqx.filter_jit
def _contract(feats1, feats2, groups: tuple[str, ...]) -> dict[str, Array]:
    """Per-group sums of G_a G_b^T over leaves: (rows1, rows2) each."""
    out: dict[str, Array] = {}
    for group, a, b in zip(groups, feats1, feats2, strict=True):
        block = jnp.matmul(a, b.T, precision=jax.lax.Precision.HIGHEST)
        out[group] = out[group] + block if group in out else block
    return out


@dataclass
class _Side:
    """One kernel argument: sequences (N, L), per-sequence row masks (R0, L), and chunks."""

    tokens: np.ndarray
    positions: np.ndarray
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # seq (B,), masks (B,R,L), rows
    n_rows: int


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


def _side(tokens, positions, masks: np.ndarray, chunk_size: int | None, per_row: bool) -> _Side:
    """Plan the chunks; `per_row`: chunk_size counts (sequence, mask) rows, else sequences."""
    tok = np.asarray(tokens).astype(np.int32)
    if tok.ndim != 2:
        raise ValueError(f"tokens: expected shape (N, L), got {tok.shape}")
    pos = _as_positions(tok, positions)
    n, r0 = tok.shape[0], masks.shape[0]
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    dest = np.arange(n * r0).reshape(n, r0)
    chunks = []
    if per_row and chunk_size is not None and chunk_size < r0:  # one sequence, slices of rows
        padded = -(-r0 // chunk_size) * chunk_size
        m = np.zeros((padded, masks.shape[1]), masks.dtype)
        m[:r0] = masks
        rows = np.full((n, padded), -1)
        rows[:, :r0] = dest
        for s in range(n):
            for start in range(0, padded, chunk_size):
                sl = slice(start, start + chunk_size)
                chunks.append((np.array([s]), m[None, sl], rows[s, sl]))
    else:
        b = n if chunk_size is None else chunk_size // r0 if per_row else chunk_size
        b = max(1, min(b, n))
        for start in range(0, n, b):
            seq = np.arange(start, start + b)
            valid = seq < n
            seq = np.where(valid, seq, 0)  # pad the last chunk: same shapes, no retrace
            rows = np.where(valid[:, None], dest[seq], -1).reshape(-1)
            chunks.append((seq, np.broadcast_to(masks, (b, *masks.shape)), rows))
    return _Side(tok, pos, chunks, n * r0)


def _chunk_features(params, static, side: _Side, chunk, kind: str, u, with_norms: bool):
    seq, masks, _ = chunk
    return _features(
        params,
        static,
        jnp.asarray(side.tokens[seq]),
        jnp.asarray(side.positions[seq]),
        jnp.asarray(masks, jnp.float32),
        kind,
        u,
        with_norms,
    )


def _same(a: _Side, b: _Side) -> bool:
    return (
        a.tokens.shape == b.tokens.shape
        and np.array_equal(a.tokens, b.tokens)
        and np.array_equal(a.positions, b.positions)
        and len(a.chunks) == len(b.chunks)
        and all(np.array_equal(x[1], y[1]) for x, y in zip(a.chunks, b.chunks, strict=True))
    )


def _kernel(
    model, side1: _Side, side2: _Side, output, with_norms: bool = False
) -> tuple[dict[str, np.ndarray], np.ndarray | None, np.ndarray | None]:
    """Per-group kernels (rows1, rows2) and, if asked, squared feature norms of both sides'
    rows (else None)."""
    kind, u = _output_spec(model, output)
    params, static = eqx.partition(model, trainable(model))
    groups = _leaf_groups(params)
    symmetric = _same(side1, side2)
    feats = lambda side, chunk: _chunk_features(params, static, side, chunk, kind, u, with_norms)
    blocks, norms1, norms2 = [], [], []
    cached2 = feats(side2, side2.chunks[0]) if len(side2.chunks) == 1 and not symmetric else None
    for i, c1 in enumerate(side1.chunks):
        f1, sq1 = feats(side1, c1)
        norms1.append((c1[2], sq1))
        for j, c2 in enumerate(side2.chunks):
            if symmetric and j < i:
                continue
            if symmetric and i == j:
                f2, sq2 = f1, sq1
            else:
                f2, sq2 = cached2 if cached2 is not None else feats(side2, c2)
            if i == 0 and not symmetric:
                norms2.append((c2[2], sq2))
            blocks.append((c1[2], c2[2], symmetric and i == j, _contract(f1, f2, groups)))
    blocks, norms1, norms2 = jax.device_get((blocks, norms1, norms2))
    out = {g: np.zeros((side1.n_rows, side2.n_rows), np.float32) for g in GROUPS}
    for rows1, rows2, diagonal, block in blocks:
        v1, v2 = rows1 >= 0, rows2 >= 0
        for g, value in block.items():
            value = (value + value.T) / 2 if diagonal else value  # exactly symmetric K(D, D)
            out[g][np.ix_(rows1[v1], rows2[v2])] = value[np.ix_(v1, v2)]
            if symmetric:
                out[g][np.ix_(rows2[v2], rows1[v1])] = value[np.ix_(v1, v2)].T
    if not with_norms:
        return out, None, None
    return out, _scatter(norms1, side1.n_rows), _scatter(norms2 or norms1, side2.n_rows)


def _scatter(parts: Sequence[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    for rows, values in parts:
        out[rows[rows >= 0]] = values[rows >= 0]
    return out


@dataclass(frozen=True)
class GradientFeatures:
    """Gradient features of N sequences x R output masks, computed once and contracted often.

    `leaves[k]` is a host float32 array (N R, C p_k) for parameter leaf k (row n R + r: sequence
    n, mask r; C = V for "trace", else 1), `groups[k]` its parameter group. Rows are linear in
    the masks, so `combine` gives features of other masks (e.g. head = all - tail) without new
    gradients. Contractions are BLAS matmuls on the host: no per-shape XLA compilations.
    """

    leaves: tuple[np.ndarray, ...]
    groups: tuple[str, ...]
    n: int
    rows: int

    def combine(self, weights) -> GradientFeatures:
        """Features of new masks sum_r w_{r'r} m_r: weights (R', R) -> (N R', ...) features."""
        w = np.asarray(weights, np.float32)
        mixed = [
            np.einsum("sr,nrp->nsp", w, leaf.reshape(self.n, self.rows, -1)).reshape(
                self.n * w.shape[0], -1
            )
            for leaf in self.leaves
        ]
        return GradientFeatures(tuple(mixed), self.groups, self.n, w.shape[0])

    def sqnorms(self) -> np.ndarray:
        """Squared feature norms (N, R), i.e. the kernel's diagonal Theta(row, row)."""
        total = sum(np.einsum("ij,ij->i", leaf, leaf) for leaf in self.leaves)
        return np.asarray(total).reshape(self.n, self.rows)


def gradient_features(
    model,
    tokens,
    *,
    masks=None,
    output="trace",
    positions=None,
    chunk_size: int | None = None,
) -> GradientFeatures:
    """Per-example gradients of F_r(x) = sum_i m_ri f_i(x) for tokens (N, L).

    `masks` (R, L) shared by every sequence or (N, R, L) per sequence (default: one all-ones
    mask, the sequence kernel's F). One forward and R C backward passes per sequence, in chunks
    of `chunk_size` sequences (the last chunk is padded, so every chunk runs one compiled
    program). Memory: N R C P floats are kept; use `sequence_kernel` with chunks when that is
    too much.
    """
    tok = np.asarray(tokens).astype(np.int32)
    if tok.ndim != 2:
        raise ValueError(f"tokens: expected shape (N, L), got {tok.shape}")
    n, length = tok.shape
    pos = _as_positions(tok, positions)
    m = _sequence_masks(length) if masks is None else np.asarray(masks, np.float32)
    if m.ndim == 2:
        m = np.broadcast_to(m, (n, *m.shape))
    if m.ndim != 3 or m.shape[0] != n or m.shape[2] != length:
        raise ValueError(f"masks: expected (R, {length}) or ({n}, R, {length}), got {m.shape}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    kind, u = _output_spec(model, output)
    params, static = eqx.partition(model, trainable(model))
    b = n if chunk_size is None else min(chunk_size, n)
    parts = []
    with jax.default_matmul_precision("highest"):
        for start in range(0, n, b):
            seq = np.minimum(np.arange(start, start + b), n - 1)  # pad: same shape, no retrace
            feats, _ = _features(
                params,
                static,
                jnp.asarray(tok[seq]),
                jnp.asarray(pos[seq]),
                jnp.asarray(m[seq]),
                kind,
                u,
                False,
            )
            keep = min(b, n - start) * m.shape[1]
            parts.append([np.asarray(f)[:keep] for f in feats])
    leaves = tuple(np.concatenate(column) for column in zip(*parts, strict=True))
    return GradientFeatures(leaves, _leaf_groups(params), n, m.shape[1])


def feature_kernels(a: GradientFeatures, b: GradientFeatures) -> dict[str, np.ndarray]:
    """Per-group kernels (N1 R1, N2 R2) between two feature sets; the groups sum to the total."""
    out = {g: np.zeros((a.n * a.rows, b.n * b.rows), np.float64) for g in GROUPS}
    for group, x, y in zip(a.groups, a.leaves, b.leaves, strict=True):
        out[group] += x @ y.T
    return {g: k.astype(np.float32) for g, k in out.items()}


def total_kernel(groups: dict[str, np.ndarray]) -> np.ndarray:
    """Sum of per-group kernels."""
    total = groups[GROUPS[0]]
    for g in GROUPS[1:]:
        total = total + groups[g]
    return total


def _sequence_masks(length: int) -> np.ndarray:
    return np.ones((1, length), np.float32)


def _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size):
    with jax.default_matmul_precision("highest"):
        side1 = _side(tokens1, positions1, _sequence_masks(np.shape(tokens1)[1]), chunk_size, False)
        side2 = _side(tokens2, positions2, _sequence_masks(np.shape(tokens2)[1]), chunk_size, False)
        return _kernel(model, side1, side2, output)[0]


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
    """Sequence kernel (N1, N2) split by parameter group (GROUPS); the groups sum to the total.

    Groups: embedding (token embedding and any learned position table), attention_qk,
    attention_vo, mlp, norms, head. `chunk_size` counts sequences per chunk.
    """
    groups = _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size)
    return {g: jnp.asarray(k) for g, k in groups.items()}


def sequence_kernel(
    model,
    tokens1,
    tokens2,
    *,
    output="trace",
    positions1=None,
    positions2=None,
    chunk_size=None,
) -> jax.Array:
    """Theta(x, x') = <grad F(x), grad F(x')> for tokens1 (N1, L1), tokens2 (N2, L2) -> (N1, N2).

    `chunk_size` counts sequences per chunk (None: each side in one chunk). A call with equal
    arguments (Theta(D, D)) computes only the upper blocks and is exactly symmetric.
    Example: `K_train = sequence_kernel(model, short, short, output=u, chunk_size=16)`.
    """
    groups = _sequence_groups(model, tokens1, tokens2, output, positions1, positions2, chunk_size)
    return jnp.asarray(total_kernel(groups))


def position_kernel(
    model,
    tokens1,
    tokens2,
    *,
    output="trace",
    positions1=None,
    positions2=None,
    chunk_size=None,
) -> jax.Array:
    """Theta_ij(x, x') = <grad f_i(x), grad f_j(x')> -> (N1, N2, L1, L2).

    `chunk_size` counts (sequence, position) rows per chunk; rows of one sequence in a chunk
    share its forward pass. Costs N L backward passes per side (times V for "trace").
    """
    n1, l1 = np.shape(tokens1)
    n2, l2 = np.shape(tokens2)
    with jax.default_matmul_precision("highest"):
        side1 = _side(tokens1, positions1, np.eye(l1, dtype=np.float32), chunk_size, True)
        side2 = _side(tokens2, positions2, np.eye(l2, dtype=np.float32), chunk_size, True)
        groups, _, _ = _kernel(model, side1, side2, output)
    total = total_kernel(groups)
    return jnp.asarray(total.reshape(n1, l1, n2, l2).transpose(0, 2, 1, 3))


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
    """Kernels of the unseen positions i >= train_length of long probes against short probes.

    F_tail(x) = sum_{i >= train_length} f_i(x), F_head = sum_{i < train_length} f_i(x), so
    F_tail + F_head = F. Returns "tail" and "head" = <grad F_tail|head(x_long), grad F(x_short)>
    (N_long, N_short), their cosines "tail_cos", "head_cos" (divided by the two gradient norms;
    0 where a norm is 0), and the squared norms "tail_sqnorm", "head_sqnorm" (N_long,),
    "short_sqnorm" (N_short,). `chunk_size` counts sequences per chunk.
    """
    n_long, l_long = np.shape(long_tokens)
    if not 0 < train_length < l_long:
        raise ValueError(f"train_length: must be in (0, {l_long}), got {train_length}")
    tail = (np.arange(l_long) >= train_length).astype(np.float32)
    masks = np.stack([tail, 1.0 - tail])
    with jax.default_matmul_precision("highest"):
        side1 = _side(long_tokens, positions_long, masks, chunk_size, False)
        l_short = np.shape(short_tokens)[1]
        side2 = _side(short_tokens, positions_short, _sequence_masks(l_short), chunk_size, False)
        groups, sq1, sq2 = _kernel(model, side1, side2, output, with_norms=True)
    assert sq1 is not None and sq2 is not None
    total = total_kernel(groups).reshape(n_long, 2, -1)
    sq1 = sq1.reshape(n_long, 2)
    out = {"tail_sqnorm": sq1[:, 0], "head_sqnorm": sq1[:, 1], "short_sqnorm": sq2}
    for r, name in enumerate(("tail", "head")):
        denom = np.sqrt(sq1[:, r, None] * sq2[None, :])
        out[name] = total[:, r]
        out[f"{name}_cos"] = np.where(denom > 0, total[:, r] / np.where(denom > 0, denom, 1), 0)
    return {k: jnp.asarray(v) for k, v in out.items()}


__all__ = [
    "GROUPS",
    "GradientFeatures",
    "feature_kernels",
    "gradient_features",
    "param_group",
    "position_kernel",
    "sequence_kernel",
    "sequence_kernel_groups",
    "tail_kernel",
    "total_kernel",
]

"""The empirical NNGP kernel at initialisation, beside the NTK (`ntk.nngp_samples`).

The NNGP is the covariance of the network's outputs over random initialisations,
K(x, x') = E_theta[F(x) F(x')], with the NTK's outputs (`ntk.output`, F = the masked sums of
`rope_lab.ntk.kernels`: sequence F, tail F_T and head F_H = F - F_T of a long probe; for
"trace" summed over the V outputs, as the NTK's trace). It is estimated over K fresh
initialisations theta_k, keys fold_in(fold_in(PRNGKey(train.seed), NNGP_STREAM), k), k < K (a
stream of their own: the trial's model is not among them, and the first K of a larger K are the
same draws), as the Gram matrix of the features phi(x) = (F_{k,c}(x))_{k,c} / sqrt(K):
K(x, x') = (1/K) sum_k sum_c F_{k,c}(x) F_{k,c}(x').

The initialisations are vmapped over their keys: one compiled program builds K models and runs
a chunk of probes through each; every probe set (short, each long set, the short probes at
positions offset by L_train for the shift error) runs padded to the longest probe length
(exact: the model is causal), so one program serves them all. The tracker writes, at step 0,
kernel "nngp", group "total", the metrics registered with `nngp` (`rope_lab.ntk.metrics`).

Cost: paid once per trial and mostly compilation (every probe set runs at the longest probe
length through the one program), less than the trial's NTK tracking; the measurement (K = 8 on
the shared 2-core CPU): benchmarks/RESULTS.md, "Figures moved from rope_lab's docstrings".
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.model.factory import make_model
from rope_lab.ntk.metrics import cosine
from rope_lab.ntk.outputs import masked_outputs, output_spec

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

NNGP_STREAM = 2  # the init stream is 0, the data stream 1 (`rope_lab.model.factory`)


def nngp_keys(cfg: TrialConfig, samples: int) -> jax.Array:
    """Keys of the NNGP's initialisations: (samples, 2), from the trial's `train.seed`."""
    base = jax.random.fold_in(jax.random.PRNGKey(cfg.train.seed), NNGP_STREAM)
    return jax.vmap(jax.random.fold_in, (None, 0))(base, jnp.arange(samples))


def init_outputs(
    cfg: TrialConfig, tokens, masks, positions, output, keys, chunk_size: int
) -> np.ndarray:
    """Outputs F_r (K, N, R, C) of the trial's model freshly initialised from each of `keys`
    (K, 2), for tokens and positions (N, L), masks (N, R, L) (`rope_lab.ntk.kernels`'s output
    kinds), `chunk_size` sequences per call (the last chunk padded: one compiled program)."""
    tok, pos = np.asarray(tokens, np.int32), np.asarray(positions, np.int32)
    m = np.asarray(masks, np.float32)
    kind, u = output_spec(SimpleNamespace(vocab_size=cfg.task.vocab_size), output)

    def one(key, tok, pos, m):
        logits = make_model(cfg, key=key)(tok, pos)  # (B, L, V)
        return jax.vmap(lambda lg, t, mm: masked_outputs(lg, t, mm, kind, u))(logits, tok, m)

    program = jax.jit(jax.vmap(one, in_axes=(0, None, None, None)))
    n, b = tok.shape[0], min(chunk_size, tok.shape[0])
    parts = []
    with jax.default_matmul_precision("highest"):
        for start in range(0, n, b):
            seq = np.minimum(np.arange(start, start + b), n - 1)
            out = program(keys, jnp.asarray(tok[seq]), jnp.asarray(pos[seq]), jnp.asarray(m[seq]))
            parts.append(np.asarray(out)[:, : min(b, n - start)])
    return np.concatenate(parts, axis=1)


def probe_outputs(cfg: TrialConfig, probes, output, keys) -> dict[str, np.ndarray]:
    """NNGP features (N, R, K C) of every probe set, from one padded program: "short" (R 1),
    "shifted" (the short probes at positions + L_train, R 1) and each long length (R 2: F, F_T).
    `probes` a `rope_lab.ntk.probes.ProbeSets`."""
    L = cfg.train.length
    sets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    ones = np.ones((1, L), np.float32)
    sets["short"] = (probes.short, np.arange(L), ones)
    sets["shifted"] = (probes.short, np.arange(L) + L, ones)
    for length, tokens in probes.long.items():
        tail = (np.arange(length) >= L).astype(np.float32)
        sets[str(length)] = (tokens, np.arange(length), np.stack([np.ones_like(tail), tail]))
    longest = max(t.shape[1] for t, _, _ in sets.values())
    target = isinstance(output, str) and output == "target"
    tok, pos, masks, sizes = [], [], [], {}
    for name, (t, p, m) in sets.items():
        n, length = t.shape
        mm = np.zeros((n, 2, longest), np.float32)
        mm[:, : m.shape[0], :length] = m
        if target:  # f_{L-1} = 0 at the probe's own length; padded, it has a next token
            mm[:, :, length - 1] = 0.0
        tok.append(np.pad(t, ((0, 0), (0, longest - length))))
        pos.append(np.pad(np.broadcast_to(p, t.shape), ((0, 0), (0, longest - length)), "edge"))
        masks.append(mm)
        sizes[name] = (n, m.shape[0])
    out = init_outputs(
        cfg, np.concatenate(tok), np.concatenate(masks), np.concatenate(pos), output, keys,
        cfg.ntk.chunk_size,
    )  # fmt: skip
    samples, feats, start = out.shape[0], {}, 0
    for name, (n, rows) in sizes.items():
        block = out[:, start : start + n, :rows]  # (K, n, rows, C)
        feats[name] = np.moveaxis(block, 0, 2).reshape(n, rows, -1) / math.sqrt(samples)
        start += n
    return feats


def nngp_kernels(feats: dict[str, np.ndarray], lengths) -> dict[str, np.ndarray]:
    """The NNGP's kernels in the tracker's kernels-file keys (`rope_lab.ntk.tracking`):
    "train/total" (n, n), "shift/total" (n, n) and per long length "cross{L}/total" (m, n),
    "diag{L}" (m,), "tailcos{L}" and "headcos{L}" (m, n), from `probe_outputs` features."""
    short = np.asarray(feats["short"][:, 0], np.float64)
    shifted = np.asarray(feats["shifted"][:, 0], np.float64)
    out = {"train/total": short @ short.T, "shift/total": shifted @ shifted.T}
    diag_short = np.einsum("np,np->n", short, short)
    for length in lengths:
        whole, tail = (np.asarray(feats[str(length)][:, r], np.float64) for r in (0, 1))
        head = whole - tail
        out[f"cross{length}/total"] = whole @ short.T
        out[f"diag{length}"] = np.einsum("np,np->n", whole, whole)
        for name, part in (("tailcos", tail), ("headcos", head)):
            sq = np.einsum("np,np->n", part, part)
            out[f"{name}{length}"] = cosine(part @ short.T, sq, diag_short)
    return out


__all__ = ["NNGP_STREAM", "init_outputs", "nngp_kernels", "nngp_keys", "probe_outputs"]

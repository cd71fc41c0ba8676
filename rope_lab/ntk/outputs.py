"""The per-position outputs f_i(x) whose gradients make the empirical NTK (`ntk.output`).

For one sequence x of length L with logits (L, V): a readout u (V,) gives f_i = <u, logits_i> /
sqrt(V) (one output, kind "vector"); "target" the next-token logit f_i = logits_{i, x_{i+1}},
with f_{L-1} = 0 (no next token); "trace" the V outputs f_{i,c} = logits_{i,c} / sqrt(V). The
kernels (`rope_lab.ntk.kernels`) and the NNGP (`rope_lab.ntk.nngp`) read the same outputs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def output_spec(model, output) -> tuple[str, Array | None]:
    """("vector", u (V,)) for an array u, or ("trace" | "target", None); ValueError otherwise.
    `model` needs only `vocab_size`."""
    if isinstance(output, str):
        if output not in ("trace", "target"):
            raise ValueError(f"output: expected 'trace', 'target' or a (V,) array, got {output!r}")
        return output, None
    u = jnp.asarray(output, jnp.float32)
    if u.shape != (model.vocab_size,):
        raise ValueError(f"output: u must have shape ({model.vocab_size},), got {u.shape}")
    return "vector", u


def masked_outputs(
    logits: Float[Array, "L V"], tokens: Array, masks: Float[Array, "R L"], kind: str, u
) -> Float[Array, "R C"]:
    """Masked sums F_r = sum_i m_ri f_i of the per-position outputs of one sequence's logits
    (L, V), tokens (L,), masks (R, L): (R, V) for "trace", else (R, 1) (module docstring)."""
    scale = 1.0 / math.sqrt(logits.shape[-1])
    if kind == "trace":
        return (masks @ logits) * scale
    if kind == "vector":
        return ((masks @ logits) @ u * scale)[:, None]
    following = jnp.sum(logits[:-1] * jax.nn.one_hot(tokens[1:], logits.shape[-1]), axis=1)
    return (masks[:, :-1] @ following)[:, None]


__all__ = ["masked_outputs", "output_spec"]

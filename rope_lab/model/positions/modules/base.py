"""The position-encoding module interface in Equinox: four hooks and a frozen-buffer wrapper.

Each encoding is an Equinox module with three hooks that take explicit (possibly offset or
randomised) positions, and one that takes queries and their logits:

- `embed(positions (*B, L))`: a (*B, L, D) vector added to the token embeddings, or None;
- `rotate(q, k, positions (L,))`: q and k of shape (L, H, Dh) after rotation (RoPE), or unchanged;
  under a relative-position remap (`modules/remapped.py`) one rotation per position set,
  (S, L, H, Dh), with `remap_choice(q_positions (Lq,), k_positions (Lk,))` the (Lq, Lk) set
  each pair is scored in (None for every other encoding);
- `bias(q_positions (Lq,), k_positions (Lk,))`: an additive (H, Lq, Lk) attention-logit bias for
  one block of queries against one block of keys, or None. Attention asks only for the blocks it
  computes, so no encoding ever builds an (H, L, L) array for the whole sequence;
- `contextual_bias(q (H, Lq, Dh), logits (H, Lq, Lk), visible (Lq, Lk))`: an additive
  (H, Lq, Lk) term computed from one block of queries and their logits against the whole key
  prefix (CoPE's gated counts), or None. Only the reference attention path calls it: it needs
  every key of a query's row at once.

The typed configs that build these modules are JAX-free (`positions/base.py: EncodingConfig`).
"""

from __future__ import annotations

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float, Int


class Frozen(eqx.Module):
    """A non-trainable array (excluded from optimisation and from the NTK parameters)."""

    value: Array

    def get(self) -> Array:
        """The array, with gradients stopped."""
        return jax.lax.stop_gradient(self.value)


class PositionEncoding(eqx.Module):
    """Base class: no position information anywhere (NoPE)."""

    def embed(self, positions: Array) -> Float[Array, "*B L D"] | None:
        """Additive input embedding for positions (*B, L), or None."""
        return None

    def rotate(
        self, q: Float[Array, "L H Dh"], k: Float[Array, "L H Dh"], positions: Array
    ) -> tuple[Array, Array]:
        """Queries and keys after the position transform."""
        return q, k

    def bias(self, q_positions: Array, k_positions: Array) -> Float[Array, "H Lq Lk"] | None:
        """Additive logit bias of queries at q_positions (Lq,) for keys at k_positions (Lk,)."""
        return None

    def remap_choice(self, q_positions: Array, k_positions: Array) -> Int[Array, "Lq Lk"] | None:
        """Under a remap, the position set (Lq, Lk) each pair is scored in; else None."""
        return None

    def contextual_bias(
        self,
        q: Float[Array, "H Lq Dh"],
        logits: Float[Array, "H Lq Lk"],
        visible: Bool[Array, "Lq Lk"],
    ) -> Float[Array, "H Lq Lk"] | None:
        """Additive logit term of queries q (H, Lq, Dh) given their float32 logits
        q k^T * scale (+ bias) against keys 0..Lk-1 (H, Lq, Lk) and the pairs attention keeps
        (Lq, Lk), or None. Attention adds it before any row scale and the mask."""
        return None

"""A rotary encoding under a relative-position remap (ReRoPE, Self-Extend, Dual Chunk
Attention, STRING: `rope_lab.model.scalings.remaps`).

`rotate` returns one rotation of q and k per position set, (S, L, H, Dh), and `remap_choice`
the set each (query, key) pair is scored in; attention computes each block's S logits and keeps
the chosen one (`attention_logits.raw_logits`). The inner encoding keeps its trained
frequencies, so the remap composes with the scaling the model was trained under. Built by
`RotaryConfig.with_scaling` for a method that `remaps`; not a registered encoding.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model.positions.base import PositionEncoding
from rope_lab.model.positions.rotary import RotaryPE
from rope_lab.model.scalings.remaps import PositionSets


class RemappedRotary(PositionEncoding):
    """`inner` rotated at each position set of `sets`."""

    inner: RotaryPE
    sets: PositionSets = eqx.field(static=True)

    def rotate(
        self, q: Float[Array, "L H Dh"], k: Float[Array, "L KV Dh"], positions: Array
    ) -> tuple[Float[Array, "S L H Dh"], Float[Array, "S L KV Dh"]]:
        """q rotated at each set's query positions and k at its key positions."""
        qs = [self.inner.rotate(q, k, p)[0] for p in self.sets.query_positions(positions)]
        ks = [self.inner.rotate(q, k, p)[1] for p in self.sets.key_positions(positions)]
        return jnp.stack(qs), jnp.stack(ks)

    def remap_choice(self, q_positions: Array, k_positions: Array) -> Int[Array, "Lq Lk"]:
        """(Lq, Lk) int32 set of each pair."""
        return self.sets.choice(q_positions, k_positions)


def unwrapped(encoding: PositionEncoding) -> PositionEncoding:
    """The rotary encoding inside a remap, or `encoding` itself."""
    return encoding.inner if isinstance(encoding, RemappedRotary) else encoding

"""A rotary encoding under a relative-position remap (ReRoPE, Self-Extend, Dual Chunk
Attention, STRING: `rope_lab.model.scalings.remaps`).

`rotate` returns one rotation of q and k per position set, (S, L, H, Dh), and `remap_choice`
the set each (query, key) pair is scored in; attention computes each block's S logits and keeps
the chosen one (`attention_logits.raw_logits`). The inner encoding keeps its trained
frequencies, so the remap composes with the scaling the model was trained under. Built by
`RotaryConfig.with_scaling` (`rescaled`, here) for a method that `remaps`; not a registered
encoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from rope_lab.model import rope
from rope_lab.model.positions.modules.base import PositionEncoding
from rope_lab.model.positions.modules.rotary import RotaryPE, with_rope_scaling
from rope_lab.model.scalings.remaps import PositionSets, Remap
from rope_lab.registry import SCALINGS

if TYPE_CHECKING:
    from rope_lab.config import ModelConfig
    from rope_lab.model.positions.rotary import RotaryConfig


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


def rescaled(
    config: RotaryConfig,
    encoding: PositionEncoding,
    model: ModelConfig,
    *,
    train_length: int,
    kind: str,
    factor: float,
    params: dict | None,
    seq_len: int | None,
) -> PositionEncoding:
    """`config`'s rotary `encoding` under scaling `kind` at `factor` (`RotaryConfig.with_scaling`):
    new frequencies of the same shapes (no recompilation), or, for a method that `remaps`, the
    encoding's own frequencies wrapped in the method's position sets (a new program)."""
    if SCALINGS[kind].remaps:
        inner = encoding.inner if isinstance(encoding, RemappedRotary) else encoding
        assert isinstance(inner, RotaryPE)
        method = rope.scaling_config(kind, **(params or {}))
        assert isinstance(method, Remap)
        sets = method.rule(factor, train_length)
        return RemappedRotary(inner, sets)
    if isinstance(encoding, RemappedRotary):  # new frequencies under the same remap
        inner = rescaled(
            config,
            encoding.inner,
            model,
            train_length=train_length,
            kind=kind,
            factor=factor,
            params=params,
            seq_len=seq_len,
        )
        return eqx.tree_at(lambda e: e.inner, encoding, inner)
    assert isinstance(encoding, RotaryPE)
    inv, attention_factor = config.frequencies(
        model, train_length, kind=kind, factor=factor, params=params, seq_len=seq_len
    )
    return with_rope_scaling(encoding, inv, attention_factor)

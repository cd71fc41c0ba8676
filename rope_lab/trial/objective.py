"""The training objective: next-token cross-entropy on the scored positions of a batch."""

from __future__ import annotations

import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float, Int

from rope_lab.model.transformer import Transformer
from rope_lab.tasks import Batch


def token_losses(
    model: Transformer, batch: Batch, positions: Int[Array, "B L"]
) -> tuple[Float[Array, "B L"], Bool[Array, "B L"]]:
    """Per-token cross-entropy (B, L) and whether the argmax prediction is right (B, L)."""
    logits = model(batch.tokens, positions)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch.targets)
    return losses, jnp.argmax(logits, axis=-1) == batch.targets


def masked_loss(model: Transformer, batch: Batch, positions: Int[Array, "B L"]) -> Float[Array, ""]:
    """Mean cross-entropy over the scored positions (`batch.mask`, (B, L)); 0 when none is."""
    losses, _ = token_losses(model, batch, positions)
    mask = batch.mask.astype(jnp.float32)
    return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)


__all__ = ["masked_loss", "token_losses"]

"""xPos's module (Sun et al. 2022): RoPE's rotation, then the query pairs multiplied and the key
pairs divided by zeta_i^(position / scale_base) (config and decay bases: `positions/xpos.py`)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from rope_lab.model.positions.modules.base import Frozen
from rope_lab.model.positions.modules.rotary import RotaryPE


class XPosPE(RotaryPE):
    """RoPE whose rotated query and key pairs are scaled by zeta^(+-position / scale_base)."""

    zeta: Frozen
    scale_base: float = eqx.field(static=True)

    def __init__(
        self, inv_freq: np.ndarray, attention_factor: float, zeta: np.ndarray, scale_base: float
    ):
        super().__init__(inv_freq, attention_factor)
        self.zeta = Frozen(jnp.asarray(zeta, jnp.float32))
        self.scale_base = float(scale_base)

    def decay(self, positions: Array) -> Float[Array, "L 1 R"]:
        """zeta^(position / scale_base) for positions (L,), on both dims of each pair."""
        power = positions.astype(jnp.float32)[:, None] / self.scale_base
        half = self.zeta.get()[None, :] ** power
        return jnp.concatenate([half, half], axis=-1)[:, None, :]

    def rotate(self, q: Array, k: Array, positions: Array) -> tuple[Array, Array]:
        """RoPE's rotation of q and k (L, H, Dh), then the decay: q times, k divided."""
        q, k = super().rotate(q, k, positions)
        decay = self.decay(positions)
        r = decay.shape[-1]
        q = jnp.concatenate([(q[..., :r] * decay).astype(q.dtype), q[..., r:]], axis=-1)
        k = jnp.concatenate([(k[..., :r] / decay).astype(k.dtype), k[..., r:]], axis=-1)
        return q, k

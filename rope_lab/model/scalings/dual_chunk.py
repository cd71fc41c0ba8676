"""``dual_chunk`` (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
Models", Dual Chunk Attention), as the authors' code computes it. Keys sit at p mod c in chunks
of c = chunk_size - local_window tokens. A query attends keys of its own chunk at p mod c
(exact relative positions), keys of the previous chunk at min(p mod c + c, chunk_size)
(exact for its first local_window tokens), and keys of every earlier chunk at
min(2c - 1, chunk_size): no relative position exceeds chunk_size. Defaults are the authors':
chunk_size = 3/4 L_train, local_window = L_train / 16. Chunks are counted on position values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rope_lab.model.scalings.remaps import PositionSets, Remap, as_float, window_or, xp
from rope_lab.model.scalings.rerope import NOT_IN_HF
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@dataclass(frozen=True)
class Chunks(PositionSets):
    """Intra-chunk, successive-chunk and inter-chunk position sets."""

    chunk_size: int
    local_window: int
    n_sets = 3
    exact_below_name = "chunk (chunk_size - local_window)"

    @property
    def exact_below(self) -> int:
        """The chunk c: positions below it are all in the first chunk, at p mod c = p."""
        return self.chunk

    @property
    def chunk(self) -> int:
        """c, the tokens per chunk."""
        return self.chunk_size - self.local_window

    def query_positions(self, p: Any) -> list[Any]:
        """p mod c; min(p mod c + c, chunk_size); min(2c - 1, chunk_size)."""
        lib, c = xp(p), self.chunk
        inner = lib.mod(as_float(p), c)
        successive = lib.minimum(inner + c, self.chunk_size)
        inter = lib.zeros_like(inner) + min(2 * c - 1, self.chunk_size)
        return [inner, successive, inter]

    def key_positions(self, p: Any) -> list[Any]:
        """p mod c in every set."""
        inner = xp(p).mod(as_float(p), self.chunk)
        return [inner, inner, inner]

    def choice(self, q: Any, k: Any) -> Any:
        """0 in the same chunk, 1 in the previous one, 2 farther back."""
        lib, c = xp(q), self.chunk
        gap = lib.floor(as_float(q) / c)[:, None] - lib.floor(as_float(k) / c)[None, :]
        return lib.where(gap <= 0, 0, lib.where(gap == 1, 1, 2)).astype(lib.int32)


@SCALINGS.register("dual_chunk")
@dataclass(frozen=True)
class DualChunk(Remap):
    """Chunk size and local window in tokens (defaults 3/4 and 1/16 of L_train)."""

    chunk_size: int | None = identity(None)
    local_window: int | None = identity(None)
    order = 23
    colors = ("#7fcdbb", "#0c2c84")
    not_in_hf = NOT_IN_HF

    def rule(self, factor: float, train_length: int) -> Chunks:
        """Resolved sizes; the chunk c = chunk_size - local_window must be positive."""
        size = window_or(self.chunk_size, train_length * 3 // 4, "chunk_size", low=2)
        local = window_or(self.local_window, train_length // 16, "local_window", low=0)
        if local >= size:
            raise ValueError(
                f"local_window must be smaller than chunk_size ({size}), got {local!r}"
            )
        return Chunks(size, local)

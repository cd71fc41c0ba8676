"""Relative-position remaps: training-free context extension that changes which relative
position a query-key pair is rotated by, not the frequencies (ReRoPE, Self-Extend, Dual Chunk
Attention, STRING). They are registered beside the frequency scalings (`eval.methods`), so the
stages, fine-tuning, NTK probes and plots take them as they take YaRN.

Every such method is a set of S *position sets*: set s gives each query a position q_s(p_i)
and each key a position k_s(p_j), and each pair (i, j) is scored in exactly one set,
`choice(p_i, p_j)`. Its logit is q_i R(q_s(p_i))^T R(k_s(p_j)) k_j, i.e. RoPE at the relative
position q_s(p_i) - k_s(p_j). Key positions depend on the key alone, so a decoding cache holds
the keys rotated once per set, and the blocked kernel computes each tile's S logits and keeps
the chosen one: no method needs kernel code of its own. The frequencies are the trained ones
(a remap on a model trained under Llama 3's scaling keeps that scaling); `inv_freq` returns
direct RoPE's, which are those of a model trained unscaled.

A method's fields are its parameters in tokens; left None they take the method's defaults from
the training length (`rule(train_length)` resolves them into a `PositionSets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rope_lab.model.scalings.base import Scaling, _base_inv_freq, _is_int, _output


@dataclass(frozen=True)
class PositionSets:
    """A resolved remap: S query / key position functions and the per-pair choice of set.

    Positions are arrays of position values (int or float); the functions use only array
    arithmetic, so they take NumPy and JAX arrays alike. Subclasses set `n_sets` and implement
    the three methods.
    """

    n_sets: ClassVar[int]
    exact_below_name: ClassVar[str]  # what `exact_below` is, in the method's parameters

    @property
    def exact_below(self) -> int:
        """The longest sequence length at which every causal pair is scored in set 0 at its
        exact relative position: up to it the remap changes nothing."""
        raise NotImplementedError

    def query_positions(self, p: Any) -> list[Any]:
        """S arrays like `p` (..., L): each query's position in set s (float32)."""
        raise NotImplementedError

    def key_positions(self, p: Any) -> list[Any]:
        """S arrays like `p` (..., L): each key's position in set s (float32)."""
        raise NotImplementedError

    def choice(self, q: Any, k: Any) -> Any:
        """(Lq, Lk) int32 set index of each pair, from positions q (Lq,) and k (Lk,)."""
        raise NotImplementedError

    def relative(self, q: Any, k: Any) -> Any:
        """(Lq, Lk) float32 relative position each pair is rotated by: q_s - k_s of its set."""
        qs, ks = self.query_positions(q), self.key_positions(k)
        chosen = self.choice(q, k)
        out = qs[0][:, None] - ks[0][None, :]
        for s in range(1, self.n_sets):
            out = _where(chosen == s, qs[s][:, None] - ks[s][None, :], out)
        return out


def xp(a: Any) -> Any:
    """The array library of `a`: NumPy for NumPy arrays and scalars, else jax.numpy."""
    if isinstance(a, (np.ndarray, np.generic, int, float)):
        return np
    import jax.numpy as jnp

    return jnp


def _where(condition: Any, a: Any, b: Any) -> Any:
    return xp(condition).where(condition, a, b)


def as_float(p: Any) -> Any:
    """Positions as float32 (NumPy or JAX, as given)."""
    return xp(p).asarray(p).astype(np.float32)


@dataclass(frozen=True)
class Remap(Scaling):
    """A relative-position remap registered as a scaling method (see the module docstring).

    Subclasses implement `rule` and check their fields in `check_lengths` (which knows the
    training length); `uses_factor` says whether `factor` is one of its parameters.
    """

    remaps: ClassVar[bool] = True
    needs_original_length = True
    uses_factor = False

    def rule(self, factor: float, train_length: int) -> PositionSets:
        """The resolved position sets at `factor` for a model trained at `train_length`."""
        raise NotImplementedError

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, then the method's own against the training length."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        assert original_length is not None
        self.rule(factor, original_length)  # resolving validates

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) direct RoPE frequencies and 1.0: a remap keeps the trained frequencies."""
        return _output(_base_inv_freq(theta, rotary_dim))


def window_or(value: int | None, default: int, name: str, *, low: int = 1) -> int:
    """`value` checked as an integer >= `low`, or `default` when None (ValueError names it)."""
    if value is None:
        return max(low, default)
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def position_set_count(kind: str, factor: float, train_length: int, params: Any = ()) -> int:
    """S, the position sets scaling `kind` at `factor` scores each pair in (1 for a frequency
    scaling); `params` the method's extra parameters (pairs or a dict). JAX-free, for the
    memory and FLOP estimates of `sweep plan`."""
    from rope_lab.registry import SCALINGS

    cls = SCALINGS[kind]
    if not cls.remaps:
        return 1
    given = {k: v for k, v in dict(params).items() if v is not None}
    return cls(**given).rule(factor, train_length).n_sets

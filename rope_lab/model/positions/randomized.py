"""Randomised positions (Ruoss et al. 2023): train on sorted random subsets of a longer range.

Orthogonal to the encoding: any encoding that takes positions can be trained this way
(`model.position.randomized`, `model.position.random_max_length`); evaluation draws its
positions the same way. This module holds the JAX-free check; the draws are
`positions/modules/randomized.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig


def check_randomized(trial: TrialConfig) -> None:
    """Randomising needs an encoding that reads positions and a range >= train.length."""
    p = trial.model.position
    if not p.randomized:
        return
    if not p.options.takes_positions:
        raise ConfigError(
            "model.position.randomized: needs an encoding that takes positions, "
            f"not kind={p.kind!r}"
        )
    if p.random_max_length is None or p.random_max_length < trial.train.length:
        raise ConfigError(
            "model.position.random_max_length: must be >= train.length="
            f"{trial.train.length} when randomized, got {p.random_max_length!r}"
        )

"""Position encodings, one config module per family, each registered in `registry.POSITIONS`.

`base` defines the typed config every family subclasses; `randomized` checks randomised
positions, which any encoding can train with. Every other module of this package is imported
here (the core ones first, in their legend order), so a new encoding is one new config module
(it registers itself) and its module in `modules`. These modules import no JAX: each config's
`build` imports its Equinox module from the subpackage `modules` (the hooks, the position
draws, PoSE, the remaps) when it builds.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from rope_lab.model.positions.alibi import AlibiConfig, alibi_slopes
from rope_lab.model.positions.base import EncodingConfig
from rope_lab.model.positions.learned import LearnedConfig
from rope_lab.model.positions.none import NoPEConfig
from rope_lab.model.positions.rotary import (
    RopeConfig,
    RotaryConfig,
    rope_frequencies,
    rotary_dim_of,
)
from rope_lab.model.positions.sinusoidal import SinusoidalConfig

if TYPE_CHECKING:
    from jaxtyping import PRNGKeyArray

    from rope_lab.config import ModelConfig
    from rope_lab.model.positions.modules.base import PositionEncoding

for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg:  # `modules`, the JAX side, is imported when an encoding is built
        importlib.import_module(f"{__name__}.{_module.name}")


def make_position_encoding(
    cfg: ModelConfig, *, max_length: int, train_length: int, key: PRNGKeyArray
) -> PositionEncoding:
    """Build the configured encoding; `max_length` sizes a learned table."""
    return cfg.position.options.build(
        cfg, max_length=max_length, train_length=train_length, key=key
    )


__all__ = [
    "AlibiConfig",
    "EncodingConfig",
    "LearnedConfig",
    "NoPEConfig",
    "RopeConfig",
    "RotaryConfig",
    "SinusoidalConfig",
    "alibi_slopes",
    "make_position_encoding",
    "rope_frequencies",
    "rotary_dim_of",
]

"""Position encodings, one module per family, each registered in `registry.POSITIONS`.

`base` defines the hooks (`embed`, `rotate`, `bias`) and the typed config every family
subclasses; `randomized` holds randomised positions, which any encoding can train with. Every
other module of this package is imported here (the core ones first, in their legend order), so
a new encoding is one new module: it registers itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from jaxtyping import PRNGKeyArray

from rope_lab.model.positions.alibi import ALiBi, AlibiConfig, alibi_slopes
from rope_lab.model.positions.base import EncodingConfig, Frozen, PositionEncoding
from rope_lab.model.positions.learned import LearnedConfig, LearnedPE
from rope_lab.model.positions.none import NoPE, NoPEConfig
from rope_lab.model.positions.randomized import batch_positions, random_positions
from rope_lab.model.positions.rotary import (
    RopeConfig,
    RotaryConfig,
    RotaryPE,
    rope_frequencies,
    rotary_dim_of,
    with_rope_scaling,
)
from rope_lab.model.positions.sinusoidal import SinusoidalConfig, SinusoidalPE

if TYPE_CHECKING:
    from rope_lab.config import ModelConfig

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def make_position_encoding(
    cfg: ModelConfig, *, max_length: int, train_length: int, key: PRNGKeyArray
) -> PositionEncoding:
    """Build the configured encoding; `max_length` sizes a learned table."""
    return cfg.position.options.build(
        cfg, max_length=max_length, train_length=train_length, key=key
    )


__all__ = [
    "ALiBi",
    "AlibiConfig",
    "EncodingConfig",
    "Frozen",
    "LearnedConfig",
    "LearnedPE",
    "NoPE",
    "NoPEConfig",
    "PositionEncoding",
    "RopeConfig",
    "RotaryConfig",
    "RotaryPE",
    "SinusoidalConfig",
    "SinusoidalPE",
    "alibi_slopes",
    "batch_positions",
    "make_position_encoding",
    "random_positions",
    "rope_frequencies",
    "rotary_dim_of",
    "with_rope_scaling",
]

"""The JAX side of the position encodings: one Equinox module per encoding family, built by its
config (`rope_lab.model.positions`), and the JAX position draws (randomised positions, PoSE).

`base` defines the hooks (`embed`, `rotate`, `bias`, `contextual_bias`) and `Frozen`; the core
names are re-exported here.
"""

from rope_lab.model.positions.modules.alibi import ALiBi
from rope_lab.model.positions.modules.base import Frozen, PositionEncoding
from rope_lab.model.positions.modules.learned import LearnedPE
from rope_lab.model.positions.modules.none import NoPE
from rope_lab.model.positions.modules.randomized import batch_positions, random_positions
from rope_lab.model.positions.modules.rotary import RotaryPE, with_rope_scaling
from rope_lab.model.positions.modules.sinusoidal import SinusoidalPE

__all__ = [
    "ALiBi",
    "Frozen",
    "LearnedPE",
    "NoPE",
    "PositionEncoding",
    "RotaryPE",
    "SinusoidalPE",
    "batch_positions",
    "random_positions",
    "with_rope_scaling",
]

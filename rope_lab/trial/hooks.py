"""The training loop's hook protocol: what a hook sees (`StepState`) and when it runs (`Hook`).

A leaf module: `rope_lab.trial.train` runs hooks, `rope_lab.ntk.tracking` and
`rope_lab.trial.pipeline` write them, and neither side imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rope_lab.model.transformer import Transformer


@dataclass
class StepState:
    """What a hook sees: the step just completed (0 = before training), model and optimizer."""

    step: int
    model: Transformer
    opt_state: Any
    history: list[dict]


@dataclass
class Hook:
    """Call `fn(state)` every `every` steps (0: never periodically) and, if `at_end`, at the end."""

    every: int
    fn: Callable[[StepState], None]
    at_end: bool = True
    at_start: bool = False


__all__ = ["Hook", "StepState"]

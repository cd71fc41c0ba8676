"""The training loop's hook protocol: what a hook sees (`StepState`) and when it runs (`Hook`).

A leaf module at the package root (it imports no rope_lab module at run time), so that
`rope_lab.trial.train` and `rope_lab.trial.ensemble` run hooks and `rope_lab.ntk.tracking` and
`rope_lab.trial.stage_work` write them without `ntk` importing from `trial`.
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
    """Call `fn(state)` every `every` steps (0: never periodically), if `at_end` at the end and,
    if `at_start`, before the first step of a run from step 0. With `steps`, only at those
    steps (a hook with its own schedule, e.g. the NTK's log-spaced steps: the loops then build
    no state for it at the other steps)."""

    every: int
    fn: Callable[[StepState], None]
    at_end: bool = True
    at_start: bool = False
    steps: frozenset[int] | None = None

    def due_at_start(self) -> bool:
        """Whether to call it before the first step of a run from step 0."""
        return self.at_start and (self.steps is None or 0 in self.steps)

    def due_after(self, done: int, total: int) -> bool:
        """Whether to call it after step `done` of a run of `total` steps."""
        periodic = bool(self.every) and done % self.every == 0
        if not (periodic or (self.at_end and done == total)):
            return False
        return self.steps is None or done in self.steps


__all__ = ["Hook", "StepState"]

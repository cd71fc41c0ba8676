"""NoPE's module: no position information, every hook the identity (config: `positions/none.py`)."""

from __future__ import annotations

from rope_lab.model.positions.modules.base import PositionEncoding


class NoPE(PositionEncoding):
    """No position information: every hook is the identity."""

"""The `tracking:` block of a sweep spec and the `sweep run` flags that set it (no JAX, no
tracker imported here).

Tracking is an execution setting: where a sweep's trials are watched live, never what they
compute, so it is a block of the spec beside `resources`, outside every `TrialConfig` and
every trial id. Each tracker named gets one run per trial (named by the trial id, grouped by
the sweep); the Parquet tables stay the record (`rope_lab.tracking.runs`). A tracker named
but not installed is refused before any work, naming the key and the pip extra.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rope_lab.roles import execution
from rope_lab.typed import check_choice

EXTRA = "pip install 'rope_lab[tracking]'"
WANDB_MODES = ("auto", "online", "offline")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # key -> the package it needs


@dataclass(frozen=True)
class TrackingConfig:
    """Trackers a sweep logs to; None: off.

    `tensorboard`: a folder; each trial's event files go to `<folder>/<sweep>/<trial_id>/`.
    `wandb`: a W&B project; each trial is the run `id=name=<trial_id>` in `group=<sweep>`,
    resumed (`resume="allow"`) when its trial resumes. `wandb_mode`: `auto` logs offline
    when `WANDB_API_KEY` is unset, online otherwise. `wandb_dir`: where W&B keeps its run
    folders (None: the sweep's run directory, `OUT/NAME/wandb/`).
    """

    tensorboard: str | None = execution(None)
    wandb: str | None = execution(None)
    wandb_mode: str = execution("auto")
    wandb_dir: str | None = execution(None)

    @property
    def enabled(self) -> bool:
        """Whether any tracker is named."""
        return self.tensorboard is not None or self.wandb is not None

    def resolved_mode(self) -> str:
        """`online` or `offline` (`auto`: offline unless `WANDB_API_KEY` is set)."""
        if self.wandb_mode != "auto":
            return self.wandb_mode
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def tracking_errors(tracking: TrackingConfig, prefix: str = "tracking.") -> list[str]:
    """One message per bad setting: an unknown `wandb_mode`, an empty name, a tracker whose
    package is not installed (naming the key, `prefix` + key, and the pip extra)."""
    errors = []
    try:
        check_choice(tracking.wandb_mode, WANDB_MODES, f"{prefix}wandb_mode")
    except ValueError as err:
        errors.append(str(err))
    for key, package in PACKAGES.items():
        value = getattr(tracking, key)
        if value is None:
            continue
        if not value.strip():
            errors.append(f"{prefix}{key}: must not be empty")
        elif importlib.util.find_spec(package) is None:
            errors.append(f"{prefix}{key}: the {package} package is not installed; {EXTRA}")
    return errors


def with_flags(
    tracking: TrackingConfig, *, tensorboard: str | None = None, wandb: str | None = None
) -> TrackingConfig:
    """`tracking` with the `sweep run` flags that were given in place of the spec's values."""
    changes = {"tensorboard": tensorboard, "wandb": wandb}
    return dataclasses.replace(tracking, **{k: v for k, v in changes.items() if v is not None})


def for_workers(tracking: TrackingConfig, run_dir: Path) -> dict[str, Any] | None:
    """The plain mapping a stage task receives (None: tracking off): folders made absolute, so
    a worker started elsewhere writes where the driver was asked to; W&B's default folder is
    the run directory."""
    if not tracking.enabled:
        return None
    out = dataclasses.asdict(tracking)
    if tracking.tensorboard is not None:
        out["tensorboard"] = str(Path(tracking.tensorboard).expanduser().resolve())
    out["wandb_dir"] = str(Path(tracking.wandb_dir or run_dir).expanduser().resolve())
    return out

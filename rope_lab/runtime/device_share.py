"""How much accelerator memory a trial's JAX process may take when trials share a device.

JAX preallocates 75% of a GPU's memory in every process by default, so with `resources.num_gpus:
0.25` (four trials per GPU) the second process on a device fails to allocate. A worker that asked
for a fraction f < 1 of a device is started with `XLA_PYTHON_CLIENT_MEM_FRACTION` set to
`HEADROOM` x f (rounded down to 0.01), so the trials Ray packs on one device fit beside each
other. The setting travels with each task (Ray's per-task `runtime_env`), so it reaches workers
whatever started the cluster. Whole devices (f >= 1) and CPU trials (f = 0) keep JAX's default;
a user who set `XLA_PYTHON_CLIENT_MEM_FRACTION` or `XLA_PYTHON_CLIENT_PREALLOCATE` in the
driver's environment keeps that choice.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

MEM_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
# of a trial's share: the CUDA context and cuDNN's workspaces live outside JAX's memory pool
HEADROOM = 0.9


def memory_fraction(num_gpus: float) -> float | None:
    """The fraction of a device's memory a trial asking for `num_gpus` may preallocate: None
    for a whole device or none (JAX's default applies), else HEADROOM x num_gpus rounded down
    to a hundredth (at least 0.01)."""
    if not 0 < num_gpus < 1:
        return None
    return max(math.floor(round(HEADROOM * num_gpus * 100, 9)) / 100, 0.01)


def device_env(num_gpus: float, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables for a worker that asked for `num_gpus` of a device (empty when JAX's
    default applies or `env`, default the driver's, already sets JAX's memory options)."""
    env = os.environ if env is None else env
    fraction = memory_fraction(num_gpus)
    if fraction is None or MEM_FRACTION in env or PREALLOCATE in env:
        return {}
    return {MEM_FRACTION: f"{fraction:.2f}"}

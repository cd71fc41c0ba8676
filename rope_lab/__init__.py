"""rope_lab: length-extrapolation sweeps for position encodings and RoPE scaling.

The public surface, each name imported from its home module on first access (so importing
`rope_lab` or `rope_lab.config` does not import JAX)::

    cfg = rope_lab.load_trial("examples/rope_passkey.yaml")     # TrialConfig
    outcome = rope_lab.run_trial(cfg, "runs/one")               # TrialOutcome
    model = rope_lab.make_model(cfg, key=jax.random.PRNGKey(0))
    rows = rope_lab.evaluate_model(model, task, cfg, step=0)
    results = rope_lab.load("runs/one")                         # polars tables of run dirs
    spec = rope_lab.load_spec("sweeps/smoke.yaml"); rope_lab.run_sweep(spec, "runs")
    model = rope_lab.load_model("runs/smoke/trials/TRIAL_ID")  # a trial's trained model
    model = rope_lab.from_hf("checkpoints/SmolLM2-135M")       # a local HF checkpoint

Everything else lives in the implementation modules (`rope_lab.trial.train`,
`rope_lab.ntk.kernels`, ...).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> home module
_HOMES = {
    "TrialConfig": "rope_lab.config",
    "load_trial": "rope_lab.config",
    "make_model": "rope_lab.model.factory",
    "TrialOutcome": "rope_lab.trial.run",
    "run_trial": "rope_lab.trial.run",
    "evaluate_model": "rope_lab.trial.evaluate",
    "load": "rope_lab.results",
    "sequence_kernel": "rope_lab.ntk.kernels",
    "position_kernel": "rope_lab.ntk.kernels",
    "load_spec": "rope_lab.sweep.spec",
    "run_sweep": "rope_lab.sweep.runner",
    "load_model": "rope_lab.trial.trained",
    "from_hf": "rope_lab.hf.weights",
}

__all__ = [
    "TrialConfig",
    "TrialOutcome",
    "evaluate_model",
    "from_hf",
    "load",
    "load_model",
    "load_spec",
    "load_trial",
    "make_model",
    "position_kernel",
    "run_sweep",
    "run_trial",
    "sequence_kernel",
]

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig, load_trial
    from rope_lab.hf.weights import from_hf
    from rope_lab.model.factory import make_model
    from rope_lab.ntk.kernels import position_kernel, sequence_kernel
    from rope_lab.results import load
    from rope_lab.sweep.runner import run_sweep
    from rope_lab.sweep.spec import load_spec
    from rope_lab.trial.evaluate import evaluate_model
    from rope_lab.trial.run import TrialOutcome, run_trial
    from rope_lab.trial.trained import load_model


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rope_lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""The NTK tracking config section (`ntk`) and its check (`check_ntk`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.roles import Unlabelled, execution, identity
from rope_lab.typed import ConfigError, check_choice, check_positive

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

NTK_OUTPUTS = ("random", "trace", "target")


@dataclass(frozen=True)
class NTKConfig:
    """Empirical-NTK tracking during training.

    Fixed probe sets (seeded, drawn once per trial from the task) of `probes` sequences at
    L_train and at each `probe_multipliers` x L_train; kernels measured at `steps` (empty:
    0, 1, 2, 4, ... and the last step). `output`: "random" (a fixed seeded Gaussian readout
    direction u, the default), "trace" (average over the vocabulary) or "target" (next-token
    logit). `position_probes` sequences give the position-resolved kernel at the end.
    `pad_to_longest`: run every probe set through one compiled gradient program at the longest
    probe length (exact for a causal model): fewer compilations, more compute per NTK step; pays
    off for tiny, compile-dominated trials (the smoke sweep), not at research sizes.
    `ridge`: of the coverage and of kernel regression (`rope_lab.ntk.predictions`), in units of
    the mean diagonal of the kernel it regularises. `nngp_samples` K > 0: the empirical NNGP
    kernel E_theta[f(x) f(x')] at initialisation over K fresh initialisations, on the same
    probes, written at step 0 with `kernel` "nngp" (`rope_lab.ntk.nngp`); 0: off.
    """

    enabled: bool = identity(True)
    probes: int = identity(8)
    probe_multipliers: tuple[float, ...] = identity((2.0, 4.0, 8.0))
    output: str = identity("random")
    steps: tuple[int, ...] = identity(())
    chunk_size: int = execution(8)
    groups: bool = identity(True)
    position_probes: int = identity(2)
    pad_to_longest: bool = execution(False)
    ridge: float = identity(1e-3)
    seed: int = identity(4321)
    nngp_samples: int = identity(
        0, neutral=0, label=Unlabelled("a measurement at initialisation: the same trained model")
    )


def check_ntk(cfg: TrialConfig) -> None:
    """`ntk.*`: output, probe counts and lengths, steps within training; ConfigError naming
    the key path."""
    tr = cfg.train
    nk = cfg.ntk
    check_choice(nk.output, NTK_OUTPUTS, "ntk.output")
    for name in ("probes", "chunk_size", "position_probes"):
        check_positive(getattr(nk, name), f"ntk.{name}")
    check_positive(nk.ridge, "ntk.ridge")
    if nk.nngp_samples < 0:
        raise ConfigError(f"ntk.nngp_samples: must be >= 0, got {nk.nngp_samples!r}")
    for i, mult in enumerate(nk.probe_multipliers):
        if mult < 1:
            raise ConfigError(f"ntk.probe_multipliers[{i}]: must be >= 1, got {mult!r}")
    for i, step in enumerate(nk.steps):
        if not 0 <= step <= tr.steps:
            raise ConfigError(f"ntk.steps[{i}]: must be in [0, train.steps={tr.steps}], got {step}")

"""``ntk_by_parts``: YaRN's frequencies without its attention factor (Peng et al. 2023, section
3.2, "NTK-by-parts" interpolation): dims that turn more than beta_fast times over the training
length keep their frequency, those turning less than beta_slow times are divided by `factor`,
and a ramp blends the dims between. With `yarn` (the same frequencies times YaRN's attention
factor) it makes YaRN's two ingredients an ablation of one sweep.

The frequencies are `yarn`'s to the bit (`yarn.ramp_blend`): the ramp runs linearly over the
dim index between the floored / ceiled bounds, as the authors' code and Hugging Face compute
it (the paper writes it as linear in r = L / wavelength). The attention factor is exactly 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import Scaling, _output
from rope_lab.model.scalings.yarn import check_ramp, ramp_blend
from rope_lab.registry import SCALINGS
from rope_lab.roles import identity


@SCALINGS.register("ntk_by_parts")
@dataclass(frozen=True)
class NtkByParts(Scaling):
    """NTK-by-parts; None fields take YaRN's defaults (betas 32 and 1, truncate True)."""

    beta_fast: float | None = identity(None)
    beta_slow: float | None = identity(None)
    truncate: bool | None = identity(None)

    needs_original_length = True
    order = 5
    colors = ("#c994c7", "#67001f")
    not_in_hf = (
        "no rope_type of its own: transformers' 'yarn' with attention_factor 1.0 computes the "
        "same frequencies (tests/model/scalings/test_ntk_by_parts.py checks them against the "
        "golden 'yarn' cases)"
    )

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Shared checks, theta > 1, and the ramp's optional parameters."""
        super().check(rotary_dim, theta=theta, factor=factor, original_length=original_length)
        check_ramp(self.name, theta, self.beta_fast, self.beta_slow, self.truncate)

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 ramp-blended frequencies (`yarn`'s), and 1.0."""
        assert original_length is not None
        inv = ramp_blend(
            rotary_dim,
            theta,
            factor,
            original_length,
            self.beta_fast,
            self.beta_slow,
            self.truncate,
        )
        return _output(inv, 1.0)

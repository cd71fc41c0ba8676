"""``dynamic_yarn``: YaRN whose factor comes from the current length (Peng et al. 2023, section
3.3, Dynamic Scaling combined with YaRN, "Dynamic-YaRN").

The paper sets the scale from the length l' of the current sequence, s = max(1, l' / L), with L
the training length (`original_length`), and applies YaRN at s: frequencies and attention factor
0.1 ln s + 1 both follow the length. rope_lab caps s at the configured `factor`,

    s = min(factor, max(1, seq_len / original_length)),

so dynamic YaRN x f is direct RoPE up to L, YaRN at exactly the needed scale from L to f x L,
and static YaRN x f beyond: the paper's definition at every length <= f x L (choose f >= the
longest length / L to have it everywhere), and the same extent as `yarn` x f, so the two differ
only in being dynamic. Up to L (and with no `seq_len`) the frequencies are `default`'s and the
attention factor is 1, as in the authors' code for a model not fine-tuned. The parameters are
`yarn`'s; an explicit `attention_factor` or the mscale pair apply from s > 1 on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rope_lab.model.scalings.base import _base_inv_freq, _output
from rope_lab.model.scalings.yarn import Yarn
from rope_lab.registry import SCALINGS


def dynamic_scale(factor: float, original_length: int, seq_len: int | None) -> float:
    """s = min(factor, max(1, seq_len / original_length)); 1 without a seq_len."""
    if seq_len is None:
        return 1.0
    return min(float(factor), max(1.0, seq_len / original_length))


@SCALINGS.register("dynamic_yarn")
@dataclass(frozen=True)
class DynamicYarn(Yarn):
    """YaRN at the scale `dynamic_scale` gives for the current length; `yarn`'s parameters."""

    length_dependent = True
    order = 6
    colors = ("#a1d99b", "#00441b")
    not_in_hf = "transformers' 'yarn' is static; its only length-dependent form is 'dynamic' NTK"

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(d/2,) float32 `yarn` frequencies and attention factor at the current scale s;
        `default`'s and 1.0 while s = 1."""
        assert original_length is not None
        scale = dynamic_scale(factor, original_length, seq_len)
        if scale <= 1.0:
            return _output(_base_inv_freq(theta, rotary_dim))
        return super().inv_freq(
            rotary_dim,
            theta=theta,
            factor=scale,
            original_length=original_length,
            seq_len=seq_len,
        )

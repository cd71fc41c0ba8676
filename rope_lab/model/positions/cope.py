"""CoPE (Golovneva et al. 2024, arXiv 2405.18719): contextual positions, counted by gates.

For query i and key j <= i (sequence indices; the integer positions are not used),

    g_it = sigmoid(s_it),  s_it = q_i . k_t * scale  (the attention logit),
    p_ij = min(sum_{t=j}^{i} g_it, npos_max - 1),
    z_i[n] = q_i . e[n] for n = 0 .. npos_max - 1,
    term_ij = (1 - w) z_i[floor p_ij] + w z_i[ceil p_ij],  w = p_ij - floor p_ij,

and term_ij is added to s_ij before the softmax. Keys that attention masks (after the query, or
outside a sliding window) have no gate (g = 0) and get no term. p_ii = g_ii in (0, 1) and p_ij
grows towards earlier keys, so CoPE counts, per head, how many keys between j and i the query
deems worth counting. The gates come from the logits themselves (the paper's default: no
separate gate key), with the model's logit scale (1/sqrt(d_head) in the paper); z is q . e, not
scaled, as in the paper's appendix code (the reference repository's default divides the term by
sqrt(d_head) too, a rescaling of e).

One table e of shape (npos_max, d_head) is shared by every head, as in the paper's code (there one
(head_dim, npos_max) table per layer); rope_lab builds one encoding per model (or per layer
kind), so here one table serves every layer. It starts at zeros, as in the paper's code, so an
untrained CoPE model is the NoPE model. `npos_max` defaults to 64; the paper's code takes it
as an argument and the reference repository defaults to the block size + 1 (set
`npos_max: train.length + 1` for that: no clamping while training).

The term needs each query's whole row of gates, so CoPE runs on the reference attention path
only (`model.attention`: auto or reference; `contextual_bias` hook): each query block against
its whole causal key prefix, so memory is quadratic in L at every length (a few (H, Lq, L)
arrays per block), where the blocked kernel would be linear. This module is the config; the
gated counts and the module `CoPE` are `modules/cope.py`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rope_lab.model.positions.base import EncodingConfig
from rope_lab.registry import POSITIONS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.model.positions.modules.cope import CoPE


@POSITIONS.register("cope")
@dataclass(frozen=True)
class CopeConfig(EncodingConfig):
    """Number of position embeddings; positions clamp at npos_max - 1
    (`model.position.cope.npos_max`)."""

    npos_max: int = identity(64)

    label = "CoPE"
    order = 9
    color = "#000000"
    hooks = frozenset({"contextual"})
    family = "contextual"
    learned = True
    takes_positions = False

    def build(self, model, *, max_length, train_length, key) -> CoPE:
        """A zero (npos_max, d_head) table."""
        from rope_lab.model.positions.modules.cope import CoPE  # deferred: imports JAX

        return CoPE(self.npos_max, model.d_head)

    def n_params(self, model, *, max_length) -> int:
        """npos_max x d_head."""
        return self.npos_max * model.d_head

    def bias_floats_per_pair(self, model) -> int:
        """Per head and pair: gate, position, its floor and weight, two gathered z, the term."""
        return 7 * model.n_heads

    def extra_flops(self, model, length) -> int:
        """Per layer: z = q . e (2 L npos_max D) and, per head and pair of the full L x L (as
        the attention estimate counts them), the gate, the cumulative sum and the
        interpolation's weight, two products and sum (5)."""
        return 2 * length * self.npos_max * model.width + 5 * model.n_heads * length * length

    def check(self, trial, path) -> None:
        """npos_max an integer >= 1; model.attention auto or reference."""
        super().check(trial, path)
        npos = self.npos_max
        if not isinstance(npos, numbers.Integral) or isinstance(npos, bool) or not npos >= 1:
            raise ConfigError(f"{path}.npos_max: must be an integer >= 1, got {npos!r}")
        attention = trial.model.attention
        if attention not in ("auto", "reference"):
            raise ConfigError(
                f"model.attention: {path} runs on the reference attention only (its term needs "
                f"each query's whole row of keys); use auto or reference, got {attention!r}"
            )

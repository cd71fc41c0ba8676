"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention"; the authors'
`stickbreaking-attention` kernels), `model.attention_fn: stick_breaking`: no softmax. Query i
walks its keys from the nearest back; each key j takes the share sigmoid(z_ij) of the stick the
nearer keys left,

    A_ij = sigmoid(z_ij) prod_{l=j+1}^{i-1} (1 - sigmoid(z_il)),   o_i = sum_{j<i} A_ij v_j,

computed in log space (log A_ij = log sigmoid(z_ij) + sum_l log sigmoid(-z_il), every term
<= 0). The index range is the paper's and the reference kernels' default (`attend_current`
False): a query sees only keys before it, j < i, and the nearest, i - 1, breaks the stick
first; query 0 reads nothing. The leftover 1 - sum_j A_ij is dropped (no normaliser; the
authors' model adds it times v_i, which is not built). A sliding window hides key j when
i - j >= window, and a hidden key neither takes a share nor breaks the stick: window w reads
w - 1 keys. Any encoding whose logits are additive (RoPE, ALiBi, NoPE, ...) combines; the row
scale (temperature, Llama 4's query scaling) sharpens the sigmoids. Its `Normaliser` reads the
weights of `stick_breaking_kernel.stick_weights` on the reference path and in cached decoding,
and runs `stick_breaking_kernel.stick_breaking_attention` as the blocked kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig, Normaliser
from rope_lab.registry import ATTENTION_FNS


class StickBreakingWeights(Normaliser):
    """Stick-breaking weights over the keys before the query (its own key hidden); the JAX
    code is imported on first call, so the config stays JAX-free."""

    own_key = False

    def row_weights(self, logits):
        """A_ij of each row (`stick_breaking_kernel.stick_weights`)."""
        from rope_lab.model.stick_breaking_kernel import stick_weights

        return stick_weights(logits)

    def blocked(self, q, k, v, encoding, row_scale, positions, plan):
        """The stick-breaking tiles (`stick_breaking_kernel.stick_breaking_attention`)."""
        from rope_lab.model.stick_breaking_kernel import stick_breaking_attention

        return stick_breaking_attention(q, k, v, encoding, row_scale, positions, plan)


@ATTENTION_FNS.register("stick_breaking")
@dataclass(frozen=True)
class StickBreaking(AttentionFnConfig):
    """Stick-breaking weights in place of softmax (`StickBreakingWeights`) over the keys
    before the query; no parameters of its own."""

    order = 6
    normaliser = StickBreakingWeights()

    def check(self, trial, path: str) -> None:
        """Scalable-Softmax (a softmax temperature) and contextual encodings (CoPE, whose gated
        counts are softmax logits' and need the reference path) are refused by name."""
        from rope_lab.typed import ConfigError

        m = trial.model
        if m.scalable_softmax:
            raise ConfigError(
                f"model.scalable_softmax: model.attention_fn {self.name!r} has no softmax whose "
                "normaliser grows with the length; set model.scalable_softmax: false"
            )
        encodings = [("model.position.kind", m.position)]
        for i, layer in enumerate(m.layers):
            encodings.append((f"model.layers[{i}].position.kind", layer.position))
        for key, position in encodings:
            if position is not None and "contextual" in position.options.hooks:
                raise ConfigError(
                    f"{key}: model.attention_fn {self.name!r} cannot take the contextual "
                    f"positions of {position.kind!r}; use an encoding with additive logits"
                )

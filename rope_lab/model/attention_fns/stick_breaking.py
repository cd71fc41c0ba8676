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
scale (temperature, Llama 4's query scaling) sharpens the sigmoids.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.attention_fns.base import AttentionFnConfig
from rope_lab.registry import ATTENTION_FNS


@ATTENTION_FNS.register("stick_breaking")
@dataclass(frozen=True)
class StickBreaking(AttentionFnConfig):
    """Stick-breaking weights (`stick_breaking`) over the keys before the query
    (`sees_own_key` False); no parameters of its own."""

    order = 6
    stick_breaking = True
    sees_own_key = False

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

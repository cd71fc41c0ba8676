"""The attention-variant interface: a typed, frozen config registered under
`model.attention_fn`, and the hooks through which every attention path computes it.

A variant is data plus hooks. Its learned arrays (`init_params`, one pytree per attention layer)
live in the layer (`Attention.fn_params`); the config itself is a static field of the layer, so
the hooks are its methods on those arrays. Hooks, and the paths that call them:

- `prior_logit(params) -> (H,) | None`: the log of an extra term in each row's softmax
  normaliser, a key of zero value that every query sees (attention sinks). The reference path
  and cached decoding add it to each row's log-sum-exp; the blocked kernel starts each row's
  online-softmax state from it (running max = the prior, normaliser = 1) and its custom VJP
  returns the prior's gradient, -sum_i exp(prior - lse_i) delta_i per head, through
  `jax.vjp` of this hook; cuDNN cannot add it and refuses the variant (`fused_ok`).
- `gate_features(model) -> int`: an output gate (gated attention). The layer owns a gate
  projection `gate` (D -> gate_features, no bias, initialised by the model's parametrisation)
  and multiplies each head's attention output by sigmoid(x W_gate) before the output projection,
  x the attention's input: per head and dimension when gate_features = heads x head_dim
  (element-wise), one scalar per head when it is heads (head-wise), none when 0. The gate acts
  after attention, so every path (reference, blocked, cuDNN, cached decoding) computes it the
  same way, in `Attention.output`.
- `forget_gate`: a data-dependent forget gate (the Forgetting Transformer). The layer owns a
  projection `forget` (D -> heads, with a zero bias) and adds to the logit of each pair (i, j)
  the sum of log sigmoid(x_l w_h + b_h) over l = j+1..i, which is c_i - c_j with c the
  cumulative sum over the sequence (`Attention.log_decay`); the reference path, the blocked
  kernel (its custom VJP returns dc = rowsum(dz) - colsum(dz)) and `attend_keys` add it, cached
  decoding from each cached key's c (`kv_cache.LayerCache.decay`); cuDNN cannot (`fused_ok`
  False).
- `normaliser`: a `Normaliser` that replaces softmax, or None (softmax, with the prior logit
  when there is one). It turns a row's masked logits into weights (`row_weights`: the
  reference path and `attend_keys`, hence cached decoding), runs its own blocked kernel
  (`blocked`: `flash.blocked_attention` calls it on the padded sequence in place of the
  online softmax) and says whether a query sees its own key (`own_key`: the reference path's
  and cached decoding's visibility; its kernel masks alike). Every path asks the hook; none
  names a variant. A normaliser is an instance made in the class body, so one missing a hook
  cannot be made and the module defining the variant fails on import; a variant with a
  normaliser that also has a forget gate, a prior logit or `fused_ok` is refused when its class
  is defined (`AttentionFnConfig.__init_subclass__`): its kernel takes none of them. cuDNN
  cannot compute a normaliser (`fused_ok` False).

Softmax (`softmax`, the default) has no parameters and no prior: every path computes exactly
what it computed before variants existed.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from jaxtyping import Array, Float, Int, PRNGKeyArray

    from rope_lab.config import ModelConfig, TrialConfig
    from rope_lab.model.flash import BlockPlan
    from rope_lab.model.positions.modules import PositionEncoding


class Normaliser(abc.ABC):
    """What a variant that replaces softmax computes in its place, on every attention path.
    Each method is abstract: a subclass missing one cannot be instantiated."""

    own_key: ClassVar[bool] = True  # query i sees key i (False: only keys j < i)

    @abc.abstractmethod
    def row_weights(self, logits: Float[Array, "H Bq Bk"]) -> Float[Array, "H Bq Bk"]:
        """Weights of masked float32 logits (MASKED where hidden), keys in sequence order,
        each row holding all its visible keys (the reference path, `attend_keys`)."""

    @abc.abstractmethod
    def blocked(
        self,
        q: Float[Array, "H L Dh"],
        k: Float[Array, "H L Dh"],
        v: Float[Array, "H L Dh"],
        encoding: PositionEncoding | None,
        row_scale: Float[Array, "H L"] | None,
        positions: Int[Array, " L"],
        plan: BlockPlan,
    ) -> Float[Array, "H L Dh"]:
        """Outputs of a sequence padded to whole blocks (`plan`), linear memory forward and
        backward, hiding what `own_key` and `plan.window` hide; under a remap q and k are
        (S, H, L, Dh)."""


@dataclasses.dataclass(frozen=True)
class AttentionFnConfig:
    """Base of every registered attention variant; `name` is set by the registry."""

    name: ClassVar[str]
    order: ClassVar[int]  # rank in the registry's listings
    # cuDNN's fused kernel computes it (`jax.nn.dot_product_attention` takes no extra terms)
    fused_ok: ClassVar[bool] = False
    # a data-dependent forget gate per head whose log sums decay each logit (FoX)
    forget_gate: ClassVar[bool] = False
    # what replaces softmax on every path (None: softmax, with the prior logit if any)
    normaliser: ClassVar[Normaliser | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """TypeError naming the class when its `normaliser` is not a `Normaliser`, or comes
        with a forget gate, a prior logit or `fused_ok`, none of which its kernel takes."""
        super().__init_subclass__(**kwargs)
        normaliser = cls.normaliser
        if normaliser is None:
            return
        if not isinstance(normaliser, Normaliser):
            raise TypeError(f"{cls.__name__}.normaliser: {normaliser!r} is not a Normaliser")
        extras = [
            ("forget_gate", cls.forget_gate),
            ("prior_logit", cls.prior_logit is not AttentionFnConfig.prior_logit),
            ("fused_ok", cls.fused_ok),
        ]
        taken = [name for name, has in extras if has]
        if taken:
            raise TypeError(
                f"{cls.__name__}: a normaliser ({type(normaliser).__name__}) replaces softmax "
                f"on every path and takes no {', '.join(taken)}"
            )

    def init_params(self, model: ModelConfig, *, key: PRNGKeyArray) -> Any:
        """The variant's learned arrays of one attention layer (a pytree; None: none)."""
        return None

    def n_params(self, model: ModelConfig) -> int:
        """Learned parameters per attention layer besides its gate (`sweep plan`'s count; the
        gate is a matmul, counted with the projections)."""
        return 0

    def gate_features(self, model: ModelConfig) -> int:
        """Features of the output gate per token: heads x head_dim, heads, or 0 for none."""
        return 0

    def projected_features(self, model: ModelConfig) -> int:
        """Features of every projection of the attention input the variant adds (the output
        gate's and the forget gate's), the matmuls `sweep plan` counts."""
        return self.gate_features(model) + (model.n_heads if self.forget_gate else 0)

    def prior_logit(self, params: Any) -> Array | None:
        """(H,) log of the extra mass in each row's softmax normaliser, or None."""
        return None

    def slug(self) -> str:
        """The trial id's readable part for the variant ('-sinks'; '' for plain softmax)."""
        return f"-{self.name}"

    def check(self, trial: TrialConfig, path: str) -> None:
        """ConfigError naming the key unless the variant's fields fit the trial."""

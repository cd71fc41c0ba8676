"""The model-family interface: a typed, frozen config registered under `model.family`.

A family's own fields live under `model.<family>` (`model.cnn.kernel_size`); the shared fields
(`model.width`, `model.depth`, `model.norm`, `model.mlp`, `model.parametrization`, ...) stay in
`ModelConfig`. What the rest of rope_lab asks of a family is a class attribute or a method here,
never its name: whether RoPE scaling stages can apply (`supports_scaling`), whether it decodes
with a cache (`decodes`), the capabilities it has (`capabilities`: a `ModelConfig` field that
needs one it lacks, as the field's role declares, is rejected off its default, naming the
field), its trial-id slug, its curve label, its receptive field and its cost.
Imports no JAX.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from rope_lab.model.config import ModelConfig
from rope_lab.roles import roles
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from jaxtyping import PRNGKeyArray

    from rope_lab.config import TrialConfig


@dataclasses.dataclass(frozen=True)
class FamilyConfig:
    """Base of every registered model family; `name` is set by the registry."""

    name: ClassVar[str]
    order: ClassVar[int]  # rank in the registry's listings
    # evaluation-time RoPE scaling may apply (then the encodings decide, `ModelConfig`)
    supports_scaling: ClassVar[bool] = True
    decodes: ClassVar[bool] = True  # greedy decoding with a cache (`rope_lab.model.decode`)
    # what the network has (`model.config.ATTENTION`, ...): a `ModelConfig` field whose role
    # `needs` another is rejected off its default (`unused_fields`)
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def build(
        self,
        model: ModelConfig,
        vocab_size: int,
        *,
        train_length: int,
        max_length: int,
        key: PRNGKeyArray,
    ) -> Any:
        """The freshly initialised network: `net(tokens (*B, L), positions) -> (*B, L, V)`."""
        raise NotImplementedError

    @property
    def unused_fields(self) -> tuple[str, ...]:
        """The `ModelConfig` fields this family has no use for: those whose role `needs` a
        capability it lacks (`rope_lab.roles`)."""
        return tuple(
            f.name
            for f, role in roles(ModelConfig)
            if isinstance(role.needs, str) and role.needs not in self.capabilities
        )

    def check(self, trial: TrialConfig, path: str) -> None:
        """ConfigError naming the key unless the family's fields fit the trial; the base
        rejects `unused_fields` set off their defaults."""
        default = ModelConfig()
        for field in self.unused_fields:
            value = getattr(trial.model, field)
            if value != getattr(default, field):
                key, leaf = _first_difference(value, getattr(default, field), f"model.{field}")
                raise ConfigError(
                    f"{key}: model.family {self.name!r} has no use for it; leave it at its "
                    f"default (got {leaf!r})"
                )

    def encoding_attributes(self, model: ModelConfig) -> dict[str, str | bool]:
        """What the trials table says of how positions enter (`encoding.*` columns): the
        model-wide encoding's `attributes()`."""
        return type(model.position.options).attributes()

    def slug(self) -> str:
        """The trial id's model part ('': the position encoding and layout name it)."""
        return ""

    def label(self) -> str:
        """The curve label of the family ('': the position encoding names the curve)."""
        return ""

    def receptive_field(self, model: ModelConfig) -> int | None:
        """Tokens an output at position t can see, counting t (None: the whole prefix)."""
        return None

    def cost(self, model: ModelConfig, vocab_size: int, length: int) -> dict[str, int] | None:
        """`n_params`, `n_params_non_embedding`, `matmul_params` and `forward_flops` (one
        length-`length` sequence) for `sweep plan`; None: the Transformer's formulas
        (`rope_lab.sweep.plan`)."""
        return None


def _first_difference(value: Any, default: Any, path: str) -> tuple[str, Any]:
    """The dotted key and value of the first leaf where two configs differ (`path` and `value`
    for scalars)."""
    if not (dataclasses.is_dataclass(value) and type(value) is type(default)):
        return path, value
    for f in dataclasses.fields(value):
        a, b = getattr(value, f.name), getattr(default, f.name)
        if a != b:
            if "registry" in f.metadata:  # a variant's fields sit under its name
                return _first_difference(a, b, f"{path}.{getattr(value, f.metadata['tag'])}")
            return _first_difference(a, b, f"{path}.{f.name}")
    return path, value

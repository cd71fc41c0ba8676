"""Field roles: what each config field is, declared once where the field is defined.

Every field of every config section and registered variant is made by `identity(...)` or
`execution(...)` (`typed.variant_field` and `typed.params_field` take a `Role` too):

- *identity*: part of what a trial computes, so part of its id (`rope_lab.trial.ids`); with a
  `neutral` value it is left out of the hash while at that value, so a field added with a
  neutral default never changes an existing id;
- *execution*: how a trial runs (attention kernel, devices, sharding, chunking, padding),
  never in an id;
- `label`: how the field names a curve off its neutral value (`Label`; or the name of a rule
  of `rope_lab.analysis.curve_labels`; or `Unlabelled(why)`), read by curve labels, legends
  and claim arms;
- `export` (model fields): how Hugging Face export treats it (`Export`: written to and decided
  by a checkpoint's config.json; only one value in the Llama family, so export refuses any
  other naming the field; or not part of a checkpoint);
- `needs` (model fields): the model-family capability the field needs (`"attention"`); a
  family without it rejects the field off its default, naming it (`FamilyConfig.check`);
- `infinite=True` (float fields): +inf is a meaningful value ("no limit": `train.clip_norm`
  .inf clips nothing); every other float refuses nan and infinities (`rope_lab.typed`).

The rest of rope_lab reads these declarations; no other list of fields exists.
`undeclared(cls)` names the fields of a config class without a role, and the missing parts
of a role its section needs (a test runs it over every config and variant). No JAX here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

ROLE: Final = "role"  # the key of a field's role in its dataclass metadata
INFINITE: Final = "infinite"  # metadata key: a float field that takes +inf (`identity`)


class _Nothing:
    """No value given (a neutral value, an export's only value, a label's `when`)."""

    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Final = _Nothing()


@dataclass(frozen=True)
class Undeclared:
    """A part of a role its declaration left out (`needs`, `export`): a placeholder a test
    rejects where the section requires the part."""


UNDECLARED: Final = Undeclared()


@dataclass(frozen=True)
class Label:
    """How a field names a curve off its neutral value: `text`, `{}` standing for the value
    (`" +PoSE {}"`); with `when`, only at that value (`train.regime`: `" +lazy"` at `lazy`)."""

    text: str
    when: Any = NOTHING


@dataclass(frozen=True)
class Unlabelled:
    """A field that names no curve although it has a neutral value, and why."""

    why: str


@dataclass(frozen=True)
class Export:
    """How Hugging Face export treats a model field: `written` (config.json holds it, and a
    checkpoint decides it), `only` (the Llama family has this value only: export refuses
    another, naming the field, and a checkpoint's model has it), or neither (not part of a
    checkpoint: how the model runs, where its weights came from)."""

    written: bool = False
    only: Any = NOTHING

    @property
    def decided_by_checkpoint(self) -> bool:
        """Whether a checkpoint's config.json decides the field (`rope_lab.hf.trial`)."""
        return self.written or self.only is not NOTHING


WRITTEN: Final = Export(written=True)
NOT_IN_CHECKPOINT: Final = Export()


def only(value: Any) -> Export:
    """`Export` of a field the Llama family has at `value` only."""
    return Export(only=value)


@dataclass(frozen=True)
class Role:
    """A field's role: identity or execution, and its neutral value, label, export and the
    family capability it needs (module docstring)."""

    identity: bool
    neutral: Any = NOTHING
    label: Label | Unlabelled | str | None = None
    export: Export | Undeclared = UNDECLARED
    needs: str | Undeclared | None = UNDECLARED

    def at_neutral(self, value: Any) -> bool:
        """Whether `value` is the neutral value (never, without one)."""
        return self.neutral is not NOTHING and value == self.neutral

    def in_id(self, value: Any) -> bool:
        """Whether a field with this role and `value` enters a trial's hash."""
        return self.identity and not self.at_neutral(value)


def identity(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    neutral: Any = NOTHING,
    label: Label | Unlabelled | str | None = None,
    export: Export | Undeclared = UNDECLARED,
    needs: str | Undeclared | None = UNDECLARED,
    infinite: bool = False,
) -> Any:
    """A dataclass field that decides what a trial computes (module docstring)."""
    role = Role(True, neutral, label, export, needs)
    metadata = {ROLE: role, INFINITE: infinite}
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def execution(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    needs: str | Undeclared | None = UNDECLARED,
) -> Any:
    """A dataclass field that decides how a trial runs, never what it computes."""
    role = Role(False, export=NOT_IN_CHECKPOINT, needs=needs)
    return dataclasses.field(default=default, default_factory=factory, metadata={ROLE: role})


def role_of(field: dataclasses.Field) -> Role:
    """The declared role of a dataclass field; TypeError naming the field without one."""
    role = field.metadata.get(ROLE)
    if not isinstance(role, Role):
        raise TypeError(f"config field {field.name!r} declares no role (rope_lab.roles)")
    return role


def roles(cls: type) -> Iterator[tuple[dataclasses.Field, Role]]:
    """Each init field of a config dataclass with its role, in declaration order."""
    for f in dataclasses.fields(cls):
        if f.init:
            yield f, role_of(f)


def undeclared(cls: type, *, model_section: bool = False, prefix: str = "") -> list[str]:
    """Dotted names of `cls`'s fields without a role, and, for a model section
    (`model_section`), without their `export` and `needs`; and of identity fields with a
    neutral value but no `label`. Empty when every declaration is complete."""
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        role = f.metadata.get(ROLE)
        name = f"{prefix}{f.name}"
        if not isinstance(role, Role):
            out.append(f"{name}: no role")
            continue
        if model_section and isinstance(role.export, Undeclared):
            out.append(f"{name}: no export")
        if model_section and isinstance(role.needs, Undeclared):
            out.append(f"{name}: no needs")
        if role.identity and role.neutral is not NOTHING and role.label is None:
            out.append(f"{name}: a neutral value but no label")
    return out

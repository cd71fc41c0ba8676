"""Typed, frozen config dataclasses: YAML-shaped mappings in and out, dotted paths, errors.

The machinery behind every config in rope_lab (`rope_lab.config` for a trial, each variant's
own config next to what it builds). Mappings inside configs are stored as sorted tuples of
pairs (`Params`) so every config is hashable. A *variant field* holds the typed config of the
registered variant another field names (`model.position.options`, chosen by
`model.position.kind`): in mappings its fields sit under the variant's name
(`model.position.rope.theta`), and sub-mappings of other registered variants are type-checked
and dropped, so a grid over kinds x RoPE fields gives each non-RoPE trial once
(`unselected_blocks` finds them: a trial file refuses them, a sweep names them).
Errors are `ConfigError`s that name the key path, the bad value and the allowed values.
Every float (of every section, variant and parameter mapping) must be finite: nan, inf and
-inf are refused naming the key, except +inf in a field declared `infinite=True`
(`rope_lab.roles`), where it means "no limit".
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from rope_lab.registry import Registry, UnknownName
from rope_lab.roles import INFINITE, ROLE, Role, role_of

Params = tuple[tuple[str, Any], ...]
T = typing.TypeVar("T")


class ConfigError(ValueError):
    """An invalid configuration; the message names the key path and the bad value."""


def freeze(value: Any) -> Any:
    """Turn mappings into sorted tuples of pairs and lists into tuples, recursively."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(params: Params) -> dict[str, Any]:
    """Inverse of `freeze` for one level of parameters: a dict with tuples turned into lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params}


def variant_class(registry: Registry, name: str, path: str) -> type:
    """The config class registered as `name`; ConfigError naming `path` and the allowed."""
    try:
        return registry[name]
    except UnknownName:
        raise ConfigError(
            f"{path}: unknown value {name!r}{_did_you_mean(name, registry.names())}; "
            f"allowed: {', '.join(registry.names())}"
        ) from None


def variant_field(registry: Registry, tag: str, *, role: Role) -> Any:
    """A dataclass field holding the config of the variant of `registry` named by field `tag`
    (its `role`: `rope_lab.roles`; the variant's own fields declare theirs)."""
    return dataclasses.field(default=None, metadata={"registry": registry, "tag": tag, ROLE: role})


def params_field(
    registry: Registry, tag: str | None = None, default: Params = (), *, role: Role
) -> Any:
    """A `Params` field whose keys are the fields of a registered variant's dataclass.

    With `tag`, the variant is the one a sibling field names (`task.params` holds the fields of
    the task `task.name` names); with `tag=None` the mapping is keyed by variant names, each
    holding that variant's fields (`eval.method_params.llama3.low_freq_factor`). Keys and value
    types are checked against the variant's fields when a config is loaded (`from_dict`), naming
    the key path and the allowed keys; the given values are stored as they were written (only
    the given keys: what a variant requires is its own check), so ids hashed from them stay
    stable. `role`: the field's role (`rope_lab.roles`).
    """
    metadata = {"params_of": registry, "tag": tag, ROLE: role}
    return dataclasses.field(default=default, metadata=metadata)


def check_params(variant: type, data: Mapping[str, Any], path: str) -> Params:
    """`data` as `Params` after checking each key is an init field of the dataclass `variant`
    and each value has that field's type; ConfigError naming the key path otherwise."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of parameters, got {data!r}")
    hints = typing.get_type_hints(variant)
    by_name = {f.name: f for f in dataclasses.fields(variant) if f.init}
    allowed = list(by_name)
    for key, value in data.items():
        if key not in allowed:
            raise ConfigError(unknown_key_message(str(key), allowed, _join(path, str(key))))
        _coerce(value, hints[key], _join(path, str(key)), infinite_allowed(by_name[key]))
    return freeze(data)


def _check_params_field(f: dataclasses.Field, value: Any, data: Mapping, path: str) -> Params:
    """A `params_field`'s mapping checked against the variant(s) it belongs to."""
    registry, tag = f.metadata["params_of"], f.metadata["tag"]
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping of parameters, got {value!r}")
    if tag is not None:
        chosen = data[tag]
        if not isinstance(chosen, str) or chosen not in registry:
            return freeze(value)  # the tag's own check names the bad variant
        return check_params(registry[chosen], value, path)
    for name, sub in value.items():
        variant = variant_class(registry, str(name), _join(path, str(name)))
        check_params(variant, sub, _join(path, str(name)))
    return freeze(value)


def dotted_fields(cls: type, prefix: str = "") -> dict[str, Any]:
    """Every leaf field of a config dataclass as dotted path -> type hint, in declaration order.

    E.g. `{"name": str, "model.width": int, ..., "task.params": Params, ...}`; nested config
    dataclasses (also optional ones, `X | None`) are descended into, `Params` mappings are
    leaves, and a variant field lists the fields of every registered variant under its name
    (`model.position.rope.theta`).
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path, tp = f"{prefix}{f.name}", hints[f.name]
        if "registry" in f.metadata:
            for name, variant in f.metadata["registry"].items():
                out.update(dotted_fields(variant, f"{prefix}{name}."))
        elif (nested := nested_dataclass(tp)) is not None:
            out.update(dotted_fields(nested, f"{path}."))
        else:
            out[path] = tp
    return out


def leaf_values(cfg: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Every leaf of a config instance as dotted path -> (type hint, value), in field order.

    Like `dotted_fields`, but a variant field gives only the chosen variant's fields (under
    its name) and a nested config that is None gives None for each of its leaves.
    """
    hints = typing.get_type_hints(type(cfg))
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(cfg):
        path, tp, value = f"{prefix}{f.name}", hints[f.name], getattr(cfg, f.name)
        if "registry" in f.metadata:
            out.update(leaf_values(value, f"{prefix}{getattr(cfg, f.metadata['tag'])}."))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(leaf_values(value, f"{path}."))
        elif value is None and (nested := nested_dataclass(tp)) is not None:
            out.update({k: (h, None) for k, h in dotted_fields(nested, f"{path}.").items()})
        else:
            out[path] = (tp, value)
    return out


def nested_dataclass(hint: Any) -> type | None:
    """The dataclass a type hint names (`X` or `X | None`), else None."""
    hint, _ = _unwrap_optional(hint)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def variant_tag(key: str, cls: type) -> tuple[str, str] | None:
    """For a dotted key inside a variant's fields, (dotted tag key, variant name), e.g.
    "model.position.rope.theta" -> ("model.position.kind", "rope"); else None."""
    head, _, rest = key.partition(".")
    for f in dataclasses.fields(cls):
        if "registry" in f.metadata and head in f.metadata["registry"]:
            return f.metadata["tag"], head
        if f.name == head and rest and dataclasses.is_dataclass(hint := _hint_of(cls, f.name)):
            found = variant_tag(rest, hint)  # type: ignore[arg-type]
            return None if found is None else (f"{head}.{found[0]}", found[1])
    return None


def _hint_of(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def to_dict(cfg: Any, *, identity_only: bool = False) -> dict[str, Any]:
    """A plain, YAML/JSON-able dict of a config (params as mappings, a variant's fields under
    its name). With `identity_only`, what decides the config's identity: fields whose role
    (`rope_lab.roles`) is execution, or that sit at their neutral value, are left out, at
    every depth (trial ids hash this)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if identity_only and not role_of(f).in_id(value):
            continue
        if "registry" in f.metadata:
            if dataclasses.fields(value):
                out[getattr(cfg, f.metadata["tag"])] = to_dict(value, identity_only=identity_only)
        elif dataclasses.is_dataclass(value):
            out[f.name] = to_dict(value, identity_only=identity_only)
        elif hints[f.name] == Params:
            out[f.name] = {k: _params_to_plain(v) for k, v in value}
        elif isinstance(value, tuple):
            out[f.name] = [
                to_dict(v, identity_only=identity_only) if dataclasses.is_dataclass(v) else v
                for v in value
            ]
        else:
            out[f.name] = value
    return out


def _params_to_plain(value: Any) -> Any:
    pairs = isinstance(value, tuple) and bool(value)
    pairs = pairs and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value
    )
    if pairs:
        return {k: _params_to_plain(v) for k, v in value}
    if isinstance(value, tuple):
        return [_params_to_plain(v) for v in value]
    return value


def _union_choices(tp: Any) -> list[Any]:
    """The non-None members of a union hint (`[tp]` for any other hint)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return [a for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def infinite_allowed(f: dataclasses.Field) -> bool:
    """Whether a float field takes +inf (declared `infinite=True`, `rope_lab.roles`)."""
    return bool(f.metadata.get(INFINITE, False))


def _finite(number: float, path: str, value: Any, infinite: bool) -> float:
    """`number`, unless it is nan or an infinity (+inf passes where `infinite`)."""
    if math.isfinite(number) or (infinite and number == math.inf):
        return number
    wanted = "a finite number or .inf" if infinite else "a finite number"
    raise ConfigError(f"{path}: expected {wanted}, got {value!r}")


def _coerce(value: Any, tp: Any, path: str, infinite: bool = False) -> Any:
    if tp == Params:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping of parameters, got {value!r}")
        return freeze(value)
    choices = _union_choices(tp)
    if len(choices) > 1 and value is not None:  # `str | float`: the first type that takes it
        for choice in choices:
            with contextlib.suppress(ConfigError):
                return _coerce(value, choice, path, infinite)
        names = " or ".join(getattr(c, "__name__", str(c)) for c in choices)
        raise ConfigError(f"{path}: expected {names}, got {value!r}")
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{path}: must not be null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return from_dict(tp, value, path)  # type: ignore[arg-type]
    if typing.get_origin(tp) is tuple:
        (inner, *_) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            value = [value]
        return tuple(_coerce(v, inner, f"{path}[{i}]", infinite) for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is int:
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole:
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        return _finite(number, path, value, infinite)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    return value


def unknown_key_message(key: str, allowed: list[str], path: str) -> str:
    """'unknown key' message with a did-you-mean suggestion and the allowed keys."""
    hint = _did_you_mean(key, allowed)
    return f"{path}: unknown key '{key}'{hint}; allowed: {', '.join(sorted(allowed))}"


def _did_you_mean(key: str, allowed: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def from_dict(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build a config dataclass from a nested mapping, rejecting unknown keys and bad types."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    kwargs = {}
    for f in (f for f in fields if "registry" in f.metadata):
        registry, tag = f.metadata["registry"], f.metadata["tag"]
        default = next(g.default for g in fields if g.name == tag)
        chosen = data.get(tag, default)
        if isinstance(chosen, str):
            variant_class(registry, chosen, _join(path, tag))
        names = [n for n in names if n != f.name] + list(registry.names())
        for name in (n for n in registry.names() if n in data):
            value, name_path = data[name], _join(path, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"{name_path}: expected a mapping, got {value!r}")
            variant = from_dict(registry[name], value or {}, name_path)
            if name == chosen:
                kwargs[f.name] = variant
    by_name = {f.name: f for f in fields}
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in names:
            raise ConfigError(unknown_key_message(str(key), names, key_path))
        if key in hints:
            kwargs[key] = _coerce(value, hints[key], key_path, infinite_allowed(by_name[key]))
            if "params_of" in by_name[key].metadata:
                tag = by_name[key].metadata["tag"]
                siblings = {tag: data.get(tag, _field_default(by_name[tag]))} if tag else {}
                kwargs[key] = _check_params_field(by_name[key], value, siblings, key_path)
    return cls(**kwargs)


def unselected_blocks(cls: type, data: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """(block path, tag path, chosen variant) of each non-empty sub-mapping of `data` for a
    registered variant its tag does not choose (`model.position.rope` under
    `model.position.kind: alibi`), at any depth: what `from_dict` checks and drops."""
    if not isinstance(data, Mapping):
        return []
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    out = []
    for f in by_name.values():
        if "registry" in f.metadata:
            registry, tag = f.metadata["registry"], f.metadata["tag"]
            chosen = data.get(tag, _field_default(by_name[tag]))
            for name in (n for n in registry.names() if data.get(n)):
                if name == chosen:
                    out += unselected_blocks(registry[name], data[name], _join(path, name))
                else:
                    out.append((_join(path, name), _join(path, tag), chosen))
        elif f.name in data:
            hint, value = hints[f.name], data[f.name]
            if (nested := nested_dataclass(hint)) is not None:
                out += unselected_blocks(nested, value, _join(path, f.name))
            elif typing.get_origin(hint) is tuple and isinstance(value, list | tuple):
                inner = nested_dataclass(typing.get_args(hint)[0])
                for i, item in enumerate(value if inner is not None else ()):
                    out += unselected_blocks(inner, item, f"{_join(path, f.name)}[{i}]")  # type: ignore[arg-type]
    return out


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_choice(value: str, allowed: tuple[str, ...], path: str) -> None:
    """ConfigError naming `path` unless `value` is one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{path}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def check_positive(value: float | int | None, path: str, *, allow_zero: bool = False) -> None:
    """ConfigError naming `path` unless `value` is None or > 0 (>= 0 with `allow_zero`)."""
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{path}: must be {bound}, got {value!r}")


def replace(cfg: Any, **changes: Any) -> Any:
    """`dataclasses.replace` that accepts dotted paths, e.g. replace(cfg, **{"model.width": 64}).

    A variant's fields are addressed by its name (`model.position.rope.theta`); changes to a
    variant other than the chosen one are dropped, as in `from_dict`.
    """
    nested: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for f in (f for f in dataclasses.fields(cfg) if "registry" in f.metadata):
        registry, tag = f.metadata["registry"], f.metadata["tag"]
        chosen = direct.get(tag, getattr(cfg, tag))
        for name in [n for n in (*nested, *direct) if n in registry]:
            sub, whole = nested.pop(name, {}), direct.pop(name, None)
            if name == chosen:
                current = getattr(cfg, f.name)
                base = whole or (current if type(current) is registry[name] else registry[name]())
                direct[f.name] = replace(base, **sub)
    for head, sub in nested.items():
        direct[head] = replace(getattr(cfg, head), **sub)
    return dataclasses.replace(cfg, **direct)

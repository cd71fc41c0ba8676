"""Plain nested data addressed by dotted keys ("model.position.kind"): set, look up, compare."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def nest(key: str, value: Any) -> dict[str, Any]:
    """{"a": {"b": value}} for key "a.b"."""
    out: dict[str, Any] = {}
    set_dotted(out, key, value)
    return out


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set a dotted key in nested dicts, copying intermediate mappings."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, Mapping) else {}
        node = node[part]
    node[last] = value


def lookup(data: Mapping, key: str) -> Any:
    """The value at a dotted key of nested mappings, or None."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def canon(value: Any) -> str:
    """Canonical JSON text of a plain value (for equality and hashing)."""
    return json.dumps(value, sort_keys=True, default=str)


def unique(values: Any) -> tuple:
    """Values in first-seen order, equal canonical forms kept once."""
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(canon(v), v)
    return tuple(seen.values())


def format_value(value: Any) -> str:
    """Compact YAML-like text of a plain value: {a: 1, b: [2, 3]}."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)

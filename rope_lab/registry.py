"""Named variants, registered where they are defined.

A `Registry` maps a name (`rope`, `yarn`, `passkey`, ...) to the class or function that defines
it. Each variant module registers itself with `@REGISTRY.register("name")`; the registry imports
its home package on first lookup, so a caller (config parsing, say) never imports the variants
itself. Adding a variant means one new module in that package: nothing else lists the names.
"""

from __future__ import annotations

import difflib
import importlib
import math
import sys
import types
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A name no variant registered; the message lists the allowed names."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Generic[T]):
    """Ordered name -> entry table for one kind of variant, filled by `register`."""

    def __init__(self, what: str, package: str):
        self.what = what  # e.g. "position encoding", used in messages
        self.package = package  # imported on first lookup; its modules register themselves
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding `entry` under `name` (and setting `entry.name` where it can)."""

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            if isinstance(entry, type):
                entry.name = name  # type: ignore[attr-defined]
            self._entries[name] = entry
            return entry

        return add

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self.package)

    def module(self) -> types.ModuleType:
        """The home package (imported on first use), for package-level hooks."""
        self._load()
        return sys.modules[self.package]

    def __getitem__(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownName(self.unknown(name)) from None

    def unknown(self, name: object) -> str:
        """Message for a name that is not registered, with a close match and the allowed."""
        close = difflib.get_close_matches(str(name), self.names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.what} {name!r}{hint}; allowed: {', '.join(self.names())}"

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def names(self) -> tuple[str, ...]:
        """Registered names, by the entries' `order` attribute, then registration order."""
        return tuple(name for name, _ in self.items())

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) pairs, by the entries' `order` attribute, then registration order."""
        self._load()
        ranked = enumerate(self._entries.items())
        ordered = sorted(ranked, key=lambda r: (getattr(r[1][1], "order", math.inf), r[0]))
        return [item for _, item in ordered]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


# The variant kinds of rope_lab, each with the package whose modules register its entries.
POSITIONS: Registry = Registry("position encoding", "rope_lab.model.positions")
SCALINGS: Registry = Registry("RoPE scaling method", "rope_lab.model.scalings")
TASKS: Registry = Registry("task", "rope_lab.tasks")
NTK_METRICS: Registry = Registry("NTK metric", "rope_lab.ntk.metrics")
PLOTS: Registry = Registry("plot kind", "rope_lab.analysis.plots")
CLAIMS: Registry = Registry("claim", "rope_lab.analysis.claims")
MODELS: Registry = Registry("model family", "rope_lab.model.families")
ATTENTION_FNS: Registry = Registry("attention variant", "rope_lab.model.attention_fns")

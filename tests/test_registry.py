"""The registry: lazy loading of its package, order, unknown names, duplicates."""

import sys
import types

import pytest

from rope_lab.registry import POSITIONS, SCALINGS, TASKS, Registry, UnknownName


def test_entries_are_ordered_by_their_order_then_registration(monkeypatch):
    package = types.ModuleType("fake_variants")
    monkeypatch.setitem(sys.modules, "fake_variants", package)
    reg = Registry("widget", "fake_variants")

    @reg.register("b")
    class B:
        order = 2

    @reg.register("a")
    class A:
        order = 1

    @reg.register("plain")
    def plain():
        return None

    @reg.register("later")
    class Later:
        pass

    assert reg.names() == ("a", "b", "plain", "later")
    assert reg["a"] is A and A.name == "a" and reg["plain"] is plain
    assert "b" in reg and "c" not in reg
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.register("a")(type("Again", (), {}))


def test_unknown_names_list_the_allowed_and_suggest_one():
    with pytest.raises(UnknownName) as info:
        POSITIONS["alibii"]
    message = str(info.value)
    assert "unknown position encoding 'alibii' (did you mean 'alibi'?)" in message
    assert message.endswith("allowed: " + ", ".join(POSITIONS.names()))
    with pytest.raises(UnknownName):
        SCALINGS[["not", "hashable"]]  # type: ignore[index]


def test_lookup_imports_the_home_package(monkeypatch):
    """A registry imports its package on first use, so callers never list the variants."""
    reg = Registry("task", "rope_lab.tasks")
    monkeypatch.delitem(sys.modules, "rope_lab.tasks", raising=False)
    assert reg.module().__name__ == "rope_lab.tasks"
    assert "rope_lab.tasks" in sys.modules
    assert TASKS.names()[0] == "passkey"

"""Keyword options of a plot function as ``rope-lab plot --set KEY=VALUE`` reaches them: the
options are read from the function's signature, each VALUE is parsed as YAML (``3``, ``0.5``,
``true``, ``[a, b]``; ``none`` where the option takes None) and checked against the option's
annotation before any data is read."""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Final

from rope_lab.analysis.query import QueryError

NOT_OPTIONS: Final = ("source", "out")  # the data and the output file: not options
_KEYWORD: Final = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NO: Final = object()  # a value that does not fit an annotation


def keyword_options(func: Callable[..., Any]) -> dict[str, tuple[inspect.Parameter, Any]]:
    """name -> (parameter, resolved annotation; Any where unresolvable) of ``func``'s keyword
    options, in signature order (``source`` and ``out`` left out)."""
    try:
        hints = typing.get_type_hints(inspect.unwrap(func))
    except (NameError, TypeError):
        hints = {}
    params = inspect.signature(func).parameters.values()
    return {
        p.name: (p, hints.get(p.name, Any))
        for p in params
        if p.name not in NOT_OPTIONS and p.kind in _KEYWORD
    }


def _annotation(p: inspect.Parameter) -> str:
    """The annotation as written (``"str | None"``)."""
    if p.annotation is inspect.Parameter.empty:
        return "any"
    ann = p.annotation
    return ann if isinstance(ann, str) else inspect.formatannotation(ann)


def describe(func: Callable[..., Any]) -> str:
    """``"group (str = 'total'), n_boot (int = 500)"``: each option, its type and default."""
    parts = []
    for name, (p, _) in keyword_options(func).items():
        default = "" if p.default is inspect.Parameter.empty else f" = {p.default!r}"
        parts.append(f"{name} ({_annotation(p)}{default})")
    return ", ".join(parts) or "(no options)"


def _fit(value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` asks (an int for a float becomes a float, a list or one item for a
    sequence a tuple), or ``_NO``; annotations it cannot check let any value through."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        fits = (_fit(value, a) for a in args)
        return next((v for v in fits if v is not _NO), _NO)
    if hint is None or hint is type(None):
        return None if value is None else _NO
    if origin is typing.Literal:
        return value if value in args else _NO
    if hint in (int, float) and isinstance(value, bool):
        return _NO
    if hint is float and isinstance(value, int | float):
        return float(value)
    if origin in (collections.abc.Sequence, list, tuple):
        if isinstance(value, dict) or value is None:
            return _NO
        items = [_fit(v, args[0] if args else Any) for v in _as_list(value)]
        return _NO if _NO in items else tuple(items)
    if isinstance(hint, type):
        return value if isinstance(value, hint) else _NO
    return value


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def parse_value(kind: str, name: str, text: str, hint: Any, written: str) -> Any:
    """The YAML ``text`` of option ``name`` (annotation ``hint``, ``written`` as in the
    signature) as that type; QueryError naming the option, its type and the value otherwise.
    A scalar that fits only as text (``1`` for a column name) is taken as written."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = str(getattr(e, "problem", "") or e).splitlines()[0]
        raise QueryError(f"--set {name}={text}: not a YAML value ({problem})") from None
    if isinstance(value, str) and value.lower() == "none" and _fit(None, hint) is None:
        return None
    fitted = _fit(value, hint)
    if fitted is _NO and not isinstance(value, list | dict):
        fitted = _fit(text.strip(), hint)
    if fitted is _NO:
        raise QueryError(
            f"--set {name}={text}: plot kind {kind!r} option {name} takes {written}, got "
            f"{value!r} ({type(value).__name__})"
        )
    return fitted


def parse_settings(kind: str, func: Callable[..., Any], settings: Sequence[str]) -> dict[str, Any]:
    """``["n_boot=50", "metrics=[a, b]"]`` -> ``{"n_boot": 50, "metrics": ("a", "b")}`` for plot
    ``kind`` drawn by ``func``: every key one of its options, once, every value of its type
    (QueryError naming the key and the allowed options otherwise)."""
    options = keyword_options(func)
    out: dict[str, Any] = {}
    for setting in settings:
        key, sep, text = setting.partition("=")
        key = key.strip()
        if not sep or not key:
            raise QueryError(f"--set {setting!r}: expected KEY=VALUE")
        if key not in options:
            allowed = ", ".join(options) or "(no options)"
            raise QueryError(
                f"plot kind {kind!r} has no option {key!r} (--set); its options: {allowed}"
            )
        if key in out:
            raise QueryError(f"--set {key} is given twice")
        p, hint = options[key]
        out[key] = parse_value(kind, key, text, hint, _annotation(p))
    return out


__all__ = ["describe", "keyword_options", "parse_settings", "parse_value"]

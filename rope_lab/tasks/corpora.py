"""Real-text corpora that every Python installation carries, named ``builtin:NAME`` as
``lm_text``'s path, so a text sweep runs on any machine without a download."""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

BUILTIN_PREFIX = "builtin:"


def python_docs() -> bytes:
    """The Python reference manual's topic pages shipped in ``pydoc_data.topics`` (about 470 kB
    of English technical prose with some code on CPython 3.11), joined in sorted key order.

    The text changes between Python releases; a result's ``python`` version says which."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics)).encode("utf-8")


CORPORA: dict[str, Callable[[], bytes]] = {"python-docs": python_docs}
_CACHE: dict[str, np.ndarray] = {}


def is_builtin(path: str) -> bool:
    """Whether ``path`` names a built-in corpus (``builtin:NAME``) rather than a file."""
    return path.startswith(BUILTIN_PREFIX)


def builtin_text(path: str) -> np.ndarray:
    """The bytes (n,) uint8, read-only, of the built-in corpus ``path`` = ``builtin:NAME``."""
    name = path[len(BUILTIN_PREFIX) :]
    if name not in CORPORA:
        allowed = ", ".join(BUILTIN_PREFIX + n for n in CORPORA)
        raise ValueError(f"lm_text: unknown built-in corpus path={path!r}; allowed: {allowed}")
    if name not in _CACHE:
        data = np.frombuffer(CORPORA[name](), dtype=np.uint8)
        data.setflags(write=False)
        _CACHE[name] = data
    return _CACHE[name]


def corpus_version(path: str) -> str:
    """What fixes a built-in corpus' bytes: the Python release it comes from."""
    return f"python {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"

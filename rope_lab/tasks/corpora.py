"""Real-text corpora that every Python installation carries, named ``builtin:NAME`` as
``lm_text``'s path (and ``corpus prepare``'s source), so a text sweep runs on any machine
without a download. Three registers, each a list of pages (the documents a train/eval split
never cuts), joined by ``"\\n\\n"``:

- ``python-docs``: English technical prose (the reference manual's topics), PSF licence;
- ``python-source``: code (:data:`STDLIB_MODULES`, the standard library's own files), PSF
  licence;
- ``unicode-data``: a semicolon-separated table, one record per named character of the
  Unicode database compiled into ``unicodedata`` (Unicode licence): short fixed fields, hex
  numbers and an upper-case vocabulary, neither prose nor code.

Each corpus' bytes are fixed by one Python release (:func:`corpus_version`).
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import numpy as np

BUILTIN_PREFIX = "builtin:"
PAGE_BREAK = "\n\n"

# single-file pure-Python modules of the standard library in every Python from 3.11 to 3.13
# (no module here became a package), in sorted order
STDLIB_MODULES = (
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "codecs", "colorsys",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "difflib", "enum", "fractions",
    "functools", "glob", "gzip", "heapq", "hmac", "inspect", "ipaddress", "keyword",
    "linecache", "locale", "numbers", "operator", "os", "posixpath", "pprint", "queue",
    "random", "shlex", "shutil", "statistics", "struct", "tempfile", "textwrap", "threading",
    "tokenize", "traceback", "types", "typing", "uuid", "warnings", "weakref",
)  # fmt: skip
UNICODE_PLANES = 2  # the Basic Multilingual and Supplementary Multilingual planes


def python_docs() -> list[str]:
    """The Python reference manual's topic pages shipped in ``pydoc_data.topics`` (about 470 kB
    of English technical prose with some code on CPython 3.11), in sorted key order.

    Licence: PSF. The text changes between Python releases."""
    from pydoc_data.topics import topics

    return [topics[name] for name in sorted(topics)]


def python_source() -> list[str]:
    """The source of each module of :data:`STDLIB_MODULES` (``<stdlib>/NAME.py``, about 1.7 MB
    of Python code with its comments and docstrings on CPython 3.11), one page a module.

    Licence: PSF. ValueError naming the file when an installation lacks one."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    pages = []
    for name in STDLIB_MODULES:
        path = stdlib / f"{name}.py"
        try:
            pages.append(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(
                f"builtin:python-source: cannot read {path} ({err.strerror}): this Python's "
                "standard library is not installed as source"
            ) from None
    return pages


def unicode_data() -> list[str]:
    """One line ``CODE;NAME;CATEGORY;BIDI;DECOMPOSITION`` per named character of the first
    :data:`UNICODE_PLANES` planes of ``unicodedata`` (names derived from the code point, as
    ``CJK UNIFIED IDEOGRAPH-4E00``, skipped), one page per block of 256 code points that has
    one (about 1.7 MB, 207 pages with Unicode 14.0).

    Licence: the Unicode License (Unicode data files). Fixed by ``unicodedata.unidata_version``."""
    import unicodedata

    pages: dict[int, list[str]] = {}
    for code in range(UNICODE_PLANES << 16):
        char = chr(code)
        name = unicodedata.name(char, "")
        if not name or name.endswith(f"-{code:04X}"):
            continue
        fields = (unicodedata.category(char), unicodedata.bidirectional(char))
        line = f"{code:04X};{name};{fields[0]};{fields[1]};{unicodedata.decomposition(char)}"
        pages.setdefault(code >> 8, []).append(line)
    return ["\n".join(lines) for _, lines in sorted(pages.items())]


CORPORA: dict[str, Callable[[], list[str]]] = {
    "python-docs": python_docs,
    "python-source": python_source,
    "unicode-data": unicode_data,
}
_CACHE: dict[str, np.ndarray] = {}


def is_builtin(path: str) -> bool:
    """Whether ``path`` names a built-in corpus (``builtin:NAME``) rather than a file."""
    return path.startswith(BUILTIN_PREFIX)


def builtin_pages(path: str) -> list[str]:
    """The pages (documents) of the built-in corpus ``path`` = ``builtin:NAME``; ValueError
    listing the built-in names for another."""
    name = path[len(BUILTIN_PREFIX) :]
    if name not in CORPORA:
        allowed = ", ".join(BUILTIN_PREFIX + n for n in CORPORA)
        raise ValueError(f"lm_text: unknown built-in corpus path={path!r}; allowed: {allowed}")
    return CORPORA[name]()


def builtin_text(path: str) -> np.ndarray:
    """The bytes (n,) uint8, read-only, of the built-in corpus ``path`` = ``builtin:NAME``:
    its pages joined by ``"\\n\\n"``, UTF-8."""
    if path not in _CACHE:
        text = PAGE_BREAK.join(builtin_pages(path)).encode("utf-8")
        data = np.frombuffer(text, dtype=np.uint8)
        data.setflags(write=False)
        _CACHE[path] = data
    return _CACHE[path]


def corpus_version(path: str) -> str:
    """What fixes a built-in corpus' bytes: the Python release it comes from (and, for
    ``unicode-data``, the Unicode version of its ``unicodedata``)."""
    import unicodedata

    release = "python {}.{}.{}".format(*sys.version_info[:3])
    if path == BUILTIN_PREFIX + "unicode-data":
        return f"unicode {unicodedata.unidata_version} ({release})"
    return release

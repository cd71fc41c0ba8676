"""The documents of ``corpus prepare``'s sources, and their hashes.

A SOURCE is a UTF-8 text file, a folder (every regular file below it, in sorted path order,
hidden files and folders skipped) or a built-in corpus (``builtin:python-docs``). The unit
that train/eval splits never cut is the **document**: one file; one page of a built-in corpus
(a topic of the Python reference manual); and, when the training side is one file alone, each
of its blank-line-separated sections (text between runs of ``"\\n\\n"``), so a single file can
still be split by ``--eval-fraction``.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SECTION_BREAK = "\n\n"


BUILTIN_PREFIX = "builtin:"  # as rope_lab.tasks.corpora (not imported: tasks import this)


def is_builtin(name: str) -> bool:
    """Whether ``name`` is a built-in corpus (``builtin:NAME``)."""
    return name.startswith(BUILTIN_PREFIX)


class CorpusError(ValueError):
    """A corpus that cannot be prepared or read: the message names the file and the reason."""


@dataclass(frozen=True)
class Source:
    """One input file (or built-in page set): its name, its bytes' sha256 and size."""

    name: str
    sha256: str
    size: int


def builtin_pages(name: str) -> list[str]:
    """The pages of built-in corpus ``builtin:NAME`` (python-docs: the topics, sorted by key)."""
    from rope_lab.tasks.corpora import CORPORA

    key = name[len(BUILTIN_PREFIX) :]
    if key not in CORPORA:
        allowed = ", ".join(BUILTIN_PREFIX + n for n in CORPORA)
        raise CorpusError(f"unknown built-in corpus {name!r}; allowed: {allowed}")
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def expand(sources: Sequence[str]) -> list[str]:
    """The files (and ``builtin:`` names) of ``sources``: folders expanded to their regular
    files in sorted order. CorpusError for a missing source or a folder without files."""
    out: list[str] = []
    for src in sources:
        src = os.fspath(src)
        if is_builtin(src):
            builtin_pages(src)  # checks the name
            out.append(src)
            continue
        path = Path(src)
        if path.is_file():
            out.append(str(path))
        elif path.is_dir():
            files = sorted(
                str(p)
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not files:
                raise CorpusError(f"source folder {src!r} holds no files")
            out.extend(files)
        else:
            raise CorpusError(
                f"source {src!r} does not exist (a text file, a folder or builtin:NAME)"
            )
    return out


READ_BYTES = 4 << 20  # bytes read at a time: no file is read whole


def read_text(path: str) -> str:
    """A text file's contents; CorpusError naming the file if it holds a NUL byte or is not
    valid UTF-8 (a binary file given as text)."""
    return "".join(_text_chunks(path))


def _text_chunks(path: str) -> Iterator[str]:
    """A text file's contents, ``READ_BYTES`` at a time, decoded incrementally; CorpusError
    naming the file and the offset of a NUL byte or of invalid UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as f:
        while True:
            data = f.read(READ_BYTES)
            if b"\x00" in data:
                raise CorpusError(
                    f"{path}: holds NUL bytes at offset {offset + data.index(0)}: a binary file, "
                    "not text"
                )
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError as err:
                held = len(decoder.getstate()[0])  # bytes of the last chunk's tail
                raise CorpusError(
                    f"{path}: not valid UTF-8 at byte {offset - held + err.start} (a binary "
                    "file, or another encoding)"
                ) from None
            offset += len(data)
            if text:
                yield text
            if not data:
                return


def sections(path: str) -> Iterator[str]:
    """The non-empty blank-line-separated sections of a text file (``str.split`` at every
    ``"\\n\\n"``, left to right), read a chunk at a time: one section in memory, not the file."""
    rest = ""
    for chunk in _text_chunks(path):
        parts = (rest + chunk).split(SECTION_BREAK)
        rest = parts.pop()
        yield from (part for part in parts if part.strip())
    if rest.strip():
        yield rest


def describe(name: str) -> Source:
    """The hash and size of a source file (read a chunk at a time) or built-in corpus (its
    pages joined as ``lm_text`` reads them)."""
    if is_builtin(name):
        data = SECTION_BREAK.join(builtin_pages(name)).encode()
        return Source(name, hashlib.sha256(data).hexdigest(), len(data))
    digest, size = hashlib.sha256(), 0
    with open(name, "rb") as f:
        while data := f.read(READ_BYTES):
            digest.update(data)
            size += len(data)
    return Source(name, digest.hexdigest(), size)


def documents(files: Sequence[str]) -> Iterator[str]:
    """The documents of ``files`` in order, one in memory at a time: a file each, a built-in
    page each, or, for one file alone, its non-empty blank-line-separated sections (read a
    chunk at a time). A generator: each call reads the files again."""
    for name in files:
        if is_builtin(name):
            yield from builtin_pages(name)
            continue
        if len(files) == 1:
            yield from sections(name)
            continue
        text = read_text(name)
        if text:
            yield text

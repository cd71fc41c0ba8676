"""The documents of ``corpus prepare``'s sources, and their hashes.

A SOURCE is a UTF-8 text file, a folder (every regular file below it, in sorted path order,
hidden files and folders skipped) or a built-in corpus (``builtin:python-docs``,
``builtin:python-source``, ``builtin:unicode-data``). The unit that train/eval splits never
cut is the **document**: one file; one page of a built-in corpus (a topic of the Python
reference manual, a module's source, a block of Unicode code points); and, when the training
side is one file alone, each of its blank-line-separated sections (text between runs of
``"\\n\\n"``), so a single file can still be split by ``--eval-fraction``.

Documents reach the tokenizer in pieces of at most ``PIECE_CHARS`` characters (:func:`pieces`),
so a document of any length (one long line) costs the memory of a piece. A piece ends at a
seam (:func:`cut`): just before a space, else any ASCII whitespace, that follows a non-space
character. Pre-tokenizers that split before whitespace and normalizers that map characters
one by one (``bytes``; ``bpe:N``'s byte-level GPT-2 pattern; in a tokenizer.json, Metaspace,
Whitespace, BERT's) never join text across a seam, so the pieces' tokens are the whole
document's, exactly. Two cases differ next to a cut: a stretch of ``PIECE_CHARS`` characters
without a seam (no whitespace, e.g. a long run of CJK text) is cut where the limit falls
(``bytes`` is unchanged; a byte-level BPE keeps the text, its tokens near the cut may differ),
and a tokenizer.json whose normalizer adds text to every input (Llama 2's ``Prepend("▁")``)
adds it to every piece.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Generator, Iterable, Iterator, Sequence
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
    """The pages of built-in corpus ``builtin:NAME`` (:mod:`rope_lab.tasks.corpora`: a topic of
    the reference manual, a standard-library module, a block of 256 Unicode code points)."""
    from rope_lab.tasks.corpora import builtin_pages as pages

    try:
        return pages(name)
    except ValueError as err:
        raise CorpusError(str(err).removeprefix("lm_text: ")) from None


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
PIECE_CHARS = 1 << 16  # text per tokenizer call (which takes ~500 bytes a character)


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
    """The documents of ``files`` in order, each whole: :func:`pieces` joined."""
    return _joined(pieces(files))


def pieces(files: Sequence[str]) -> Iterator[tuple[str, bool]]:
    """The documents of ``files`` in order, as (text, ends_document) pieces of at most
    ``PIECE_CHARS`` characters, one piece in memory at a time: a file each, a built-in page
    each, or, for one file alone, its non-empty blank-line-separated sections. A piece ends
    at a seam (:func:`cut`). A generator: each call reads the files again."""
    for name in files:
        if is_builtin(name):
            for page in builtin_pages(name):
                yield from _pieces([page]) if page else [("", True)]
        elif len(files) == 1:
            yield from _pieces(_text_chunks(name), SECTION_BREAK)
        else:
            yield from _pieces(_text_chunks(name))


# Seams: a non-space character followed by a space (first choice: Metaspace turns the space
# into the "▁" that opens the next piece, as it would inside the whole text), else by any ASCII
# whitespace; the whitespace starts the next piece.
_SEAMS = (
    re.compile(r".*\S(?= )", re.DOTALL),
    re.compile(r".*\S(?=[\t\n\r\f\v])", re.DOTALL),
)


def cut(text: str, start: int, limit: int) -> int:
    """Where the piece of ``text`` from ``start`` ends, at most ``limit`` characters on: at
    the last seam in reach, just before a space that follows a non-space character, else
    before any ASCII whitespace that does; ``start + limit`` when no seam is in reach (or the
    end of ``text``). A pre-tokenizer that splits before whitespace gives the two sides of a
    seam the tokens the whole text has there."""
    end = min(start + limit, len(text))
    for seam in _SEAMS:
        found = seam.match(text, start, min(end + 1, len(text)))
        if found:
            return found.end()
    return end


def _pieces(chunks: Iterable[str], breaks: str | None = None) -> Iterator[tuple[str, bool]]:
    """``chunks`` of text as (piece, ends_document) (:func:`pieces`): one document, or, with
    ``breaks``, the non-blank documents between ``breaks``; a document whose text so far is
    all whitespace is held until it is known not to be skipped."""
    rest, started = "", False
    for chunk in chunks:
        *ended, rest = (rest + chunk).split(breaks) if breaks else [rest + chunk]
        for part in ended:
            if started or not _blank(part):
                start, _ = yield from _heads(part, True)
                yield part[start:], True
            started = False
        start, cut_any = yield from _heads(rest, started or not breaks)
        rest, started = rest[start:], started or cut_any
    if started or (not _blank(rest) if breaks else rest != ""):
        yield rest, True


def _heads(text: str, free: bool) -> Generator[tuple[str, bool], None, tuple[int, bool]]:
    """Pieces cut from the front of ``text`` while more than ``PIECE_CHARS`` remain (none ends
    a document); where the rest starts, and whether a piece was cut. Unless ``free``, a piece
    of only whitespace is not cut (its section may turn out blank, and be skipped)."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = cut(text, start, PIECE_CHARS)
        if not free and text[start:end].isspace():
            break
        yield text[start:end], False
        free, start = True, end
    return start, start > 0


def _blank(text: str) -> bool:
    return not text or text.isspace()


def _joined(parts: Iterable[tuple[str, bool]]) -> Iterator[str]:
    """Whole documents from (piece, ends_document) pairs."""
    held: list[str] = []
    for text, last in parts:
        held.append(text)
        if last:
            yield "".join(held)
            held = []

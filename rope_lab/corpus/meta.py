"""A prepared corpus folder: ``meta.json`` read and checked, its ``.bin`` files memory-mapped.

Layout of ``DIR`` (written by :mod:`rope_lab.corpus.prepare`): ``train.bin`` and ``eval.bin``
(raw little-endian token ids, ``meta["dtype"]``), ``tokenizer.json`` and ``meta.json``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rope_lab.corpus.sources import CorpusError
from rope_lab.runtime.checked_files import CorruptFile, corrupt, read_json

SPLIT_FILES = {"train": "train.bin", "eval": "eval.bin"}
FORMAT = 1
REQUIRED = (
    "format",
    "dtype",
    "vocab_size",
    "train_tokens",
    "eval_tokens",
    "train_bytes",
    "eval_bytes",
    "document_separator",
    "tokenizer",
    "sources",
    "fingerprint",
)


DTYPES = ("<u2", "<u4")  # the token id dtypes `rope-lab corpus prepare` writes
_TYPES: dict[str, type] = {
    "format": int,
    "dtype": str,
    "vocab_size": int,
    "train_tokens": int,
    "eval_tokens": int,
    "train_bytes": int,
    "eval_bytes": int,
    "document_separator": str,
    "tokenizer": dict,
    "sources": list,
    "fingerprint": str,
}
_REPREPARE = "prepare the corpus again"


class CorruptCorpusFile(CorruptFile, CorpusError):
    """A damaged file of a prepared corpus (a CorpusError and a ConfigError), named."""


def read_meta(folder: str | Path) -> dict[str, Any]:
    """``DIR/meta.json`` as a dict; CorpusError naming the folder if it is not a prepared corpus
    (no meta.json), or CorruptCorpusFile naming meta.json if it is unreadable, not JSON, misses
    a key or holds a value of the wrong type."""
    path = Path(folder) / "meta.json"
    if not path.is_file():
        raise CorpusError(
            f"{folder}: no meta.json, not a prepared corpus (make one with `rope-lab corpus "
            f"prepare SOURCE... --out {folder} --tokenizer T`)"
        )
    meta = read_json(path, hint=_REPREPARE, error=CorruptCorpusFile)

    def bad(what: str) -> Exception:
        return corrupt(path, what, hint=_REPREPARE, error=CorruptCorpusFile)

    if not isinstance(meta, dict):
        raise bad(f"holds a JSON {type(meta).__name__}, not an object")
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise bad(f"misses {', '.join(missing)}")
    for key, kind in _TYPES.items():
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(f"has {key} = {value!r}, not a JSON {kind.__name__}")
        if isinstance(value, int) and value < 0:
            raise bad(f"has {key} = {value}, a negative count")
    if meta["format"] != FORMAT:
        raise CorpusError(f"{path}: format {meta['format']}, this rope_lab reads {FORMAT}")
    if meta["dtype"] not in DTYPES:
        raise bad(f"has dtype = {meta['dtype']!r}, not one of {', '.join(DTYPES)}")
    return dict(meta)


def check_sizes(folder: str | Path, meta: dict[str, Any]) -> None:
    """CorruptCorpusFile (a CorpusError) naming the file unless each ``.bin`` is exactly
    ``tokens x itemsize`` bytes."""
    itemsize = np.dtype(meta["dtype"]).itemsize
    for split, name in SPLIT_FILES.items():
        path = Path(folder) / name
        want = int(meta[f"{split}_tokens"]) * itemsize
        have = path.stat().st_size if path.is_file() else None
        if have != want:
            found = "missing" if have is None else f"{have} bytes"
            raise CorruptCorpusFile(
                f"{path}: {found}, but meta.json says {meta[f'{split}_tokens']} {meta['dtype']} "
                f"tokens = {want} bytes (a truncated or replaced file: prepare the corpus again)"
            )


def open_split(folder: str | Path, split: str) -> np.memmap:
    """The token ids of ``split`` ("train" or "eval") as a read-only memory map (n,), after
    :func:`check_sizes`; nothing is read until indexed."""
    meta = read_meta(folder)
    check_sizes(folder, meta)
    path = Path(folder).resolve() / SPLIT_FILES[split]
    st = path.stat()  # a corpus prepared again is a new file: a new map
    return _memmap(str(path), meta["dtype"], st.st_ino, st.st_mtime_ns)


@cache
def _memmap(path: str, dtype: str, inode: int, mtime_ns: int) -> np.memmap:
    return np.memmap(path, dtype=np.dtype(dtype), mode="r")


def token_bytes(folder: str | Path) -> np.ndarray:
    """Bytes of text per token id (V,) int64, from the corpus' own ``tokenizer.json`` (bytes:
    all 1)."""
    return _token_bytes(str(Path(folder).resolve() / "tokenizer.json"))


@cache
def _token_bytes(path: str) -> np.ndarray:
    from tokenizers import Tokenizer

    from rope_lab.corpus.tokenizers import token_byte_lengths

    out = token_byte_lengths(Tokenizer.from_file(path))
    out.setflags(write=False)
    return out

"""``rope-lab corpus prepare``: tokenize text sources once into a corpus folder that
``lm_tokens`` memory-maps.

The documents (:mod:`rope_lab.corpus.sources`) are split whole between train and eval: the
``--eval`` sources, or the last documents holding ``--eval-fraction`` of the text (default
0.1). Each split's token stream is its documents in order, each followed by the document
separator ``"\\n\\n"`` (encoded by the tokenizer), so a bytes corpus of ``builtin:python-docs``
is ``lm_text``'s text of it plus one trailing separator. Written into a hidden sibling folder
and renamed into place, so an interrupted run leaves no half-written corpus (and a later run
removes the folder a killed one left: :mod:`rope_lab.corpus.staging`); a folder whose
``meta.json`` has the same fingerprint (format, tokenizer, sources' hashes, split) is left
untouched. The documents are streamed, never held together, nor any one of them whole: a first
pass records each one's size (the split and the progress total need no more), then the BPE
trainer and the encoder read the sources again as pieces of at most ``sources.PIECE_CHARS``
characters cut at seams (`sources.pieces`: the same tokens as the whole document), encoded
``CHUNK_BYTES`` of text at a time, and files are read and hashed in ``sources.READ_BYTES``
chunks (a lone file's sections included).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rope_lab.corpus import tokenizers as toks
from rope_lab.corpus.meta import FORMAT, SPLIT_FILES, check_sizes, read_meta
from rope_lab.corpus.sources import CorpusError, describe, expand, is_builtin, pieces
from rope_lab.corpus.staging import remove_stale, staging, swap_in

SEPARATOR = "\n\n"
DEFAULT_EVAL_FRACTION = 0.1
CHUNK_BYTES = 1 << 20  # text per encode call (pieces encoded in parallel)


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` did (``status``: "written", "replaced" or "unchanged"), the
    corpus' meta.json, and the staging folders of killed runs it removed."""

    status: str
    folder: Path
    meta: dict[str, Any]
    removed: tuple[Path, ...] = ()


def fingerprint(
    tokenizer: str, files: Sequence[str], eval_files: Sequence[str] | None, fraction: float | None
) -> tuple[str, dict[str, Any]]:
    """sha256 of what decides the corpus' bytes, and the record it hashes (the sources' names,
    hashes and sizes, the tokenizer spec or file hash, the split)."""
    kind, _ = toks.parse_spec(tokenizer)
    tok_id = (
        hashlib.sha256(Path(tokenizer).read_bytes()).hexdigest() if kind == "file" else tokenizer
    )
    record = {
        "format": FORMAT,
        "tokenizer": tok_id,
        "train_sources": [describe(f).__dict__ for f in files],
        "eval_sources": None if eval_files is None else [describe(f).__dict__ for f in eval_files],
        "eval_fraction": fraction,
        "separator": SEPARATOR,
    }
    blob = json.dumps(record, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest(), record


def split_point(sizes: Sequence[int], fraction: float) -> int:
    """How many documents train on: the last documents whose UTF-8 bytes (``sizes``, one per
    document) first reach ``fraction`` of the total are eval; at least one document each
    (CorpusError naming the count otherwise)."""
    if len(sizes) < 2:
        raise CorpusError(
            f"--eval-fraction needs at least 2 documents to split whole, the sources hold "
            f"{len(sizes)} (give more files, a file with blank-line-separated sections, or --eval)"
        )
    target, held, cut = fraction * sum(sizes), 0, len(sizes)
    while cut > 1 and held < target:
        cut -= 1
        held += sizes[cut]
    return cut


@dataclass(frozen=True)
class _Scan:
    """What one pass over the documents of some files found, holding none of them: each
    document's UTF-8 size and whether it holds more than whitespace."""

    sizes: tuple[int, ...]
    texts: tuple[bool, ...]

    @classmethod
    def of(cls, files: Sequence[str]) -> _Scan:
        sizes, texts, size, text = [], [], 0, False
        for piece, last in pieces(files):
            size, text = size + len(piece.encode()), text or bool(piece.strip())
            if last:
                sizes.append(size)
                texts.append(text)
                size, text = 0, False
        return cls(tuple(sizes), tuple(texts))

    def part(self, start: int, stop: int | None = None) -> _Scan:
        return _Scan(self.sizes[start:stop], self.texts[start:stop])


def prepare(
    sources: Sequence[str],
    out: str | Path,
    tokenizer: str,
    *,
    eval_sources: Sequence[str] | None = None,
    eval_fraction: float | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Prepared:
    """Tokenize ``sources`` into ``out`` (train.bin, eval.bin, tokenizer.json, meta.json);
    nothing is written when ``out`` already holds this corpus. ``out`` must be new, empty, or a
    corpus folder (another corpus only with ``overwrite``), and apart from every source
    (`check_target`). CorpusError for an input error."""
    out = Path(out)
    check_target(out, [*sources, *(eval_sources or [])])
    if eval_sources is not None and eval_fraction is not None:
        raise CorpusError("give --eval or --eval-fraction, not both")
    if eval_sources is None:
        eval_fraction = DEFAULT_EVAL_FRACTION if eval_fraction is None else eval_fraction
        if not 0.0 < eval_fraction < 1.0:
            raise CorpusError(f"--eval-fraction must be in (0, 1), got {eval_fraction}")
    kind, bpe_size = toks.parse_spec(tokenizer)
    files = expand(sources)
    eval_files = None if eval_sources is None else expand(eval_sources)
    fp, record = fingerprint(tokenizer, files, eval_files, eval_fraction)
    removed = tuple(remove_stale(out))
    status = "written"
    if (out / "meta.json").is_file():
        try:
            old = read_meta(out)
        except CorpusError:
            old = None  # a damaged corpus of rope_lab's: rewritten
        if old is not None and old["fingerprint"] == fp:
            try:
                check_sizes(out, old)
                return Prepared("unchanged", out, old, removed)
            except CorpusError:
                pass  # the same corpus with a damaged file: written again
        elif old is not None and not overwrite:
            spec = (old.get("tokenizer") or {}).get("spec", "?")
            raise CorpusError(
                f"--out {out}: holds another corpus (tokenizer {spec}; other sources, split or "
                "tokenizer than these); pass --overwrite to replace it"
            )
        status = "replaced"

    # The documents are streamed, never held together: one pass finds their sizes (and any
    # input error, before anything is written), then each use reads the sources again.
    scan = _Scan.of(files)
    parts: dict[str, tuple[Sequence[str], int, int | None]]
    if eval_files is None:
        assert eval_fraction is not None
        cut = split_point(scan.sizes, eval_fraction)
        train_scan, eval_scan = scan.part(0, cut), scan.part(cut)
        parts = {"train": (files, 0, cut), "eval": (files, cut, None)}
    else:
        train_scan, eval_scan = scan, _Scan.of(eval_files)
        parts = {"train": (files, 0, None), "eval": (eval_files, 0, None)}

    def pieces_of(split: str) -> Iterator[tuple[str, bool]]:
        names, start, stop = parts[split]
        return _documents_between(pieces(names), start, stop)

    for split, found, names in (("train", train_scan, files), ("eval", eval_scan, eval_files)):
        if not any(found.texts):
            raise CorpusError(f"empty corpus: the {split} sources {names or files} hold no text")

    if kind == "bytes":
        tok = toks.bytes_tokenizer()
    elif kind == "bpe":
        assert bpe_size is not None
        tok = toks.train_bpe((text for text, _ in pieces_of("train")), bpe_size)
    else:
        tok = toks.load_file(tokenizer)
    vocab_size = int(tok.get_vocab_size())
    dtype = toks.dtype_for(vocab_size)
    lengths = toks.token_byte_lengths(tok)

    with staging(out) as tmp:
        counts: dict[str, Any] = {}
        sizes = (*train_scan.sizes, *eval_scan.sizes)
        total = sum(sizes) + len(SEPARATOR.encode()) * len(sizes)
        with _progress(total, progress) as bar:
            for split in ("train", "eval"):
                with open(tmp / SPLIT_FILES[split], "xb") as out_file:
                    read = pieces_of(split)
                    counts[split] = _write_split(out_file, read, tok, kind, dtype, lengths, bar)
        (tmp / "tokenizer.json").write_text(toks.tokenizer_json(tok))
        meta = {
            "format": FORMAT,
            "dtype": dtype.str,
            "vocab_size": vocab_size,
            **{f"{s}_{k}": v for s, c in counts.items() for k, v in c.items() if k != "exact"},
            "document_separator": SEPARATOR,
            "document_unit": "file; page of a built-in corpus; blank-line section of a lone file",
            "bytes_per_token_exact": all(c["exact"] for c in counts.values()),
            "tokenizer": {"spec": tokenizer, "sha256": toks.tokenizer_hash(tok)},
            "sources": record["train_sources"],
            "eval_sources": record["eval_sources"],
            "eval_fraction": eval_fraction,
            "fingerprint": fp,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        for name in OWNED:
            with open(tmp / name, "rb") as f:
                os.fsync(f.fileno())
        swap_in(tmp, out)
    return Prepared(status, out, meta, removed)


# the files a corpus folder holds: all that `prepare` writes, and so all it may replace
OWNED = (*SPLIT_FILES.values(), "tokenizer.json", "meta.json")


def check_target(out: Path, sources: Sequence[str]) -> None:
    """CorpusError unless ``out`` can take a corpus without touching anything else: absent, an
    empty folder or a folder of only the corpus files (`OWNED`), neither a source nor inside
    one nor holding one."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"--out {out}: a file, not a folder; give a new or empty folder")
    target = out.resolve()
    for src in sources:
        if is_builtin(os.fspath(src)):
            continue
        path = Path(src).resolve()
        if path == target or target in path.parents or path in target.parents:
            raise CorpusError(
                f"--out {out}: overlaps the source {src}; write the corpus to a folder of its own"
            )
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in OWNED)
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise CorpusError(
                f"--out {out}: holds files that are not a rope_lab corpus ({shown}); give a "
                "new or empty folder"
            )


def _documents_between(
    found: Iterable[tuple[str, bool]], start: int, stop: int | None
) -> Iterator[tuple[str, bool]]:
    """The (piece, ends_document) pairs of documents ``start`` to ``stop`` (None: the last)."""
    index = 0
    for piece, last in found:
        if stop is not None and index >= stop:
            return
        if index >= start:
            yield piece, last
        index += last


def _write_split(
    f: BinaryIO,
    found: Iterable[tuple[str, bool]],
    tok: Any,
    kind: str,
    dtype: np.dtype,
    lengths: np.ndarray,
    bar: Callable[[int], None],
) -> dict[str, Any]:
    """Encode the documents' pieces ``found`` (each document followed by the separator; read
    as they come, ``CHUNK_BYTES`` of text held at a time) into ``f``: token, byte and document
    counts, and whether the tokens' byte lengths add up to the text's bytes."""
    tokens = nbytes = counted = n_docs = 0
    chunk: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal tokens, counted
        ids = np.concatenate(toks.encode(tok, chunk, kind)) if chunk else np.zeros(0, np.int64)
        f.write(ids.astype(dtype).tobytes())
        tokens += ids.size
        counted += int(lengths[ids].sum())

    for piece, last in found:
        chunk.append(piece)
        if last:
            n_docs += 1
            chunk.append(SEPARATOR)
        n = len(piece.encode()) + (len(SEPARATOR) if last else 0)
        size += n
        nbytes += n
        bar(n)
        if size >= CHUNK_BYTES:
            flush()
            chunk, size = [], 0
    flush()
    return {"tokens": tokens, "bytes": nbytes, "documents": n_docs, "exact": counted == nbytes}


class _progress:
    """A bytes progress bar on stderr: tqdm when installed, else a counter every 10%."""

    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show, self.done, self.shown = total, show, 0, 0
        self.bar = None
        if show:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total, unit="B", unit_scale=True, desc="tokenizing", file=sys.stderr
                )
            except ImportError:
                pass

    def __enter__(self) -> Callable[[int], None]:
        return self.update

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.show and self.done * 10 >= (self.shown + 1) * self.total:
            self.shown = self.done * 10 // max(self.total, 1)
            print(f"tokenizing: {self.done:,} / {self.total:,} bytes", file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def _ids_fingerprint(train: np.ndarray, held_out: np.ndarray, dtype: np.dtype) -> str:
    """sha256 of the two token arrays as written (their dtype, each split's ids)."""
    digest = hashlib.sha256(np.dtype(dtype).str.encode())
    for ids in (train, held_out):
        digest.update(np.ascontiguousarray(np.asarray(ids).astype(dtype)).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def write_ids(
    out: str | Path, train: np.ndarray, held_out: np.ndarray, vocab_size: int = 256
) -> Path:
    """A corpus folder from token ids made elsewhere (train (n,), eval (m,)), with the bytes
    tokenizer's ``tokenizer.json`` (so ``vocab_size`` 256; bits per byte = loss / ln 2): for
    tests and benchmarks that need a token file of a given size without tokenizing text."""
    out = Path(out)
    dtype = toks.dtype_for(vocab_size)
    with staging(out) as tmp:
        for split, ids in (("train", train), ("eval", held_out)):
            np.asarray(ids).astype(dtype).tofile(tmp / SPLIT_FILES[split])
        (tmp / "tokenizer.json").write_text(toks.tokenizer_json(toks.bytes_tokenizer()))
        meta = {
            "format": FORMAT,
            "dtype": dtype.str,
            "vocab_size": vocab_size,
            "train_tokens": int(train.size),
            "eval_tokens": int(held_out.size),
            "train_bytes": int(train.size),
            "eval_bytes": int(held_out.size),
            "document_separator": SEPARATOR,
            "tokenizer": {"spec": "bytes", "sha256": ""},
            "sources": [],
            "fingerprint": _ids_fingerprint(train, held_out, dtype),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        swap_in(tmp, out)
    return out

"""Tokenizers of ``corpus prepare``: ``bytes``, ``bpe:N`` (a byte-level BPE trained on the
training text) or a ``tokenizer.json`` path, all as Hugging Face ``tokenizers`` objects, and the
byte length of every token (what bits per byte divides by).

``bytes`` is a byte-level model with the 256 byte symbols and no merges, in byte order, so
token id = byte value; its corpus is encoded with NumPy directly (the same ids, checked in the
tests), the Hugging Face object is only written out as ``tokenizer.json``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import numpy as np

from rope_lab.corpus.sources import CorpusError

UINT32_TOKENS = 2**32


@cache
def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet (byte -> printable character), as ``tokenizers``' ByteLevel
    pre-tokenizer uses it: printable Latin-1 bytes map to themselves, the rest to 256 + k."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _byte_level(model):
    from tokenizers import Tokenizer, decoders, pre_tokenizers

    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def bytes_tokenizer():
    """The ``bytes`` tokenizer: 256 tokens, id = byte value."""
    from tokenizers import models, pre_tokenizers

    vocab = {ch: b for b, ch in byte_alphabet().items()}
    tok = _byte_level(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tok


def train_bpe(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE of ``vocab_size`` tokens (>= 256: the byte alphabet first) trained on
    ``texts``; the same texts give the same tokenizer."""
    from tokenizers import models, pre_tokenizers, trainers

    tok = _byte_level(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``bytes`` -> ("bytes", 256); ``bpe:N`` -> ("bpe", N); a path -> ("file", None).
    CorpusError for a bad N, a vocabulary past uint32 or a missing file."""
    if spec == "bytes":
        return "bytes", 256
    if spec.startswith("bpe:"):
        try:
            n = int(spec[4:])
        except ValueError:
            raise CorpusError(f"--tokenizer {spec!r}: N in bpe:N must be an integer") from None
        if n >= UINT32_TOKENS:
            raise CorpusError(
                f"--tokenizer {spec!r}: a vocabulary of {n} tokens does not fit uint32 "
                f"(at most {UINT32_TOKENS - 1} tokens)"
            )
        if n < 256:
            raise CorpusError(f"--tokenizer {spec!r}: a byte-level BPE needs N >= 256")
        return "bpe", n
    if not Path(spec).is_file():
        raise CorpusError(
            f"--tokenizer {spec!r}: not 'bytes', 'bpe:N' or an existing tokenizer.json"
        )
    return "file", None


def load_file(path: str):
    """A ``tokenizer.json``; CorpusError naming the file if ``tokenizers`` cannot read it or
    its vocabulary does not fit uint32."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises its own Exception subclass
        raise CorpusError(
            f"{path}: not a tokenizer.json that tokenizers can read ({err})"
        ) from None
    if tok.get_vocab_size() >= UINT32_TOKENS:
        raise CorpusError(f"{path}: {tok.get_vocab_size()} tokens do not fit uint32")
    return tok


def tokenizer_json(tok) -> str:
    """The tokenizer serialised (the bytes written as ``tokenizer.json``)."""
    return str(tok.to_str())


def tokenizer_hash(tok) -> str:
    """sha256 of :func:`tokenizer_json`."""
    return hashlib.sha256(tokenizer_json(tok).encode()).hexdigest()


def dtype_for(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32 (CorpusError past uint32)."""
    if vocab_size <= 2**16:
        return np.dtype("<u2")
    if vocab_size <= UINT32_TOKENS:
        return np.dtype("<u4")
    raise CorpusError(f"a vocabulary of {vocab_size} tokens does not fit uint32")


def token_byte_lengths(tok) -> np.ndarray:
    """Bytes of text each token id stands for (V,) int64: for a byte-level tokenizer the count
    of byte symbols of its string; otherwise the UTF-8 length of the token decoded alone (exact
    for tokens that are whole characters). Special (added) tokens count 0."""
    size = tok.get_vocab_size()
    lengths = np.zeros(size, dtype=np.int64)
    inverse = set(byte_alphabet().values())
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    byte_level = type(tok.decoder).__name__ == "ByteLevel"
    for token, i in tok.get_vocab().items():
        if token in special:
            continue
        if byte_level and all(ch in inverse for ch in token):
            lengths[i] = len(token)
        else:
            lengths[i] = len(tok.decode([i], skip_special_tokens=False).encode())
    return lengths


def encode(tok, texts: list[str], kind: str) -> list[np.ndarray]:
    """Token ids of each text (int64 arrays): bytes with NumPy, the others with ``tokenizers``'
    batch encoder (parallel in Rust)."""
    if kind == "bytes":
        return [np.frombuffer(t.encode(), dtype=np.uint8).astype(np.int64) for t in texts]
    return [
        np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(texts, add_special_tokens=False)
    ]

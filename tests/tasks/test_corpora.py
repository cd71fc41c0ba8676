"""Tests for rope_lab.tasks.corpora: built-in real-text corpora for ``lm_text``."""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import jax
import numpy as np
import pytest

from rope_lab.tasks import corpora, make_task
from rope_lab.tasks.corpora import builtin_text, is_builtin
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import as_numpy


def test_python_docs_is_the_pydoc_topics_text() -> None:
    from pydoc_data.topics import topics

    data = builtin_text("builtin:python-docs")
    expected = "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    assert data.tobytes() == expected
    assert data.size > 100_000  # enough text that L_train windows rarely repeat
    assert not data.flags.writeable
    assert is_builtin("builtin:python-docs") and not is_builtin("docs/builtin:x")


def test_unknown_corpus_names_the_allowed_ones() -> None:
    allowed = "builtin:python-docs, builtin:python-source, builtin:unicode-data"
    with pytest.raises(ValueError) as err:
        builtin_text("builtin:shakespeare")
    assert str(err.value) == (
        f"lm_text: unknown built-in corpus path='builtin:shakespeare'; allowed: {allowed}"
    )
    with pytest.raises(ValueError, match=f"allowed: {allowed}$"):
        make_task("lm_text", 256, path="builtin:shakespeare")


@pytest.mark.parametrize("name", ["python-source", "unicode-data"])
def test_a_builtin_corpus_is_the_same_bytes_on_every_read(name: str) -> None:
    """Two reads from scratch (the cache emptied) give the same sha256: the pages' order and
    contents are fixed, not the file system's or a dict's order."""
    path = f"builtin:{name}"
    first = hashlib.sha256(builtin_text(path).tobytes()).hexdigest()
    corpora._CACHE.clear()
    pages = corpora.builtin_pages(path)
    assert hashlib.sha256(builtin_text(path).tobytes()).hexdigest() == first
    assert builtin_text(path).tobytes() == "\n\n".join(pages).encode()
    assert 1_000_000 < builtin_text(path).size < 3_000_000


def test_python_source_is_the_stdlib_modules_in_order() -> None:
    pages = corpora.builtin_pages("builtin:python-source")
    assert len(pages) == len(corpora.STDLIB_MODULES) == 47
    assert list(corpora.STDLIB_MODULES) == sorted(corpora.STDLIB_MODULES)
    abc_py = Path(sysconfig.get_paths()["stdlib"]) / "abc.py"
    assert pages[0] == abc_py.read_text() and pages[0].startswith("# Copyright 2007 Google")
    assert builtin_text("builtin:python-source")[:24].tobytes() == b"# Copyright 2007 Google,"
    assert '"""Weak reference support for Python.' in pages[-1]  # weakref.py


def test_unicode_data_is_one_record_per_named_character() -> None:
    import unicodedata

    pages = corpora.builtin_pages("builtin:unicode-data")
    assert pages[0].splitlines()[0x41 - 0x20] == "0041;LATIN CAPITAL LETTER A;Lu;L;"
    assert pages[0].startswith("0020;SPACE;Zs;WS;\n0021;EXCLAMATION MARK;Po;ON;")
    records = [line for page in pages for line in page.splitlines()]
    assert "00E9;LATIN SMALL LETTER E WITH ACUTE;Ll;L;0065 0301" in records
    assert not any(r.startswith("4E00;") for r in records)  # CJK UNIFIED IDEOGRAPH-4E00
    if unicodedata.unidata_version == "14.0.0":  # Python 3.11
        assert (len(records), len(pages)) == (43482, 207)
    blocks = [int(page[: page.index(";")], 16) >> 8 for page in pages]
    assert blocks == sorted(set(blocks))  # one page per 256-code-point block, in order
    assert corpora.corpus_version("builtin:unicode-data").startswith(
        f"unicode {unicodedata.unidata_version} (python 3."
    )


def test_lm_text_on_a_builtin_corpus_reads_its_held_out_tail() -> None:
    task = make_task("lm_text", 256, path="builtin:python-docs", eval_fraction=0.1)
    data = builtin_text("builtin:python-docs")
    held_out = round(0.1 * data.size)
    assert task.split_bytes("eval").tobytes() == data[data.size - held_out :].tobytes()
    tokens, targets, _ = as_numpy(sample_batch(task, 4, 32, split="eval", key=jax.random.key(1)))
    tail = data[data.size - held_out :].tobytes()
    for row_tok, row_tgt in zip(tokens, targets, strict=True):
        window = np.append(row_tok, row_tgt[-1]).astype(np.uint8).tobytes()
        assert window in tail

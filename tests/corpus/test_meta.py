"""A prepared corpus' meta.json and token files: bad JSON, wrong types, a token file of the
wrong size are named in one line (a CorpusError and a ConfigError)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rope_lab.corpus import CorpusError, open_split, prepare, read_meta
from rope_lab.runtime.checked_files import CorruptFile

AGAIN = "; prepare the corpus again"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"doc{i}.txt").write_text(f"Document {i}: " + "word " * (20 + i))
    return prepare([str(src)], tmp_path / "corpus", "bytes", progress=False).folder


def _rewrite(corpus: Path, **changes) -> Path:
    path = corpus / "meta.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))
    return path


def _raises(corpus: Path, expected: str) -> None:
    with pytest.raises(CorruptFile) as info:
        read_meta(corpus)
    assert isinstance(info.value, CorpusError)
    assert re.fullmatch(re.escape(str(corpus / "meta.json")) + expected, str(info.value))


def test_invalid_json_and_a_list_are_named(corpus):
    assert read_meta(corpus)["dtype"] == "<u2"
    path = corpus / "meta.json"
    path.write_text(path.read_text()[:40])
    _raises(corpus, r" is not valid JSON \(40 bytes\): .+" + AGAIN)
    path.write_text("[1, 2]")
    _raises(corpus, " holds a JSON list, not an object" + AGAIN)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"train_tokens": "120"}, " has train_tokens = '120', not a JSON int"),
        ({"vocab_size": True}, " has vocab_size = True, not a JSON int"),
        ({"eval_tokens": -3}, " has eval_tokens = -3, a negative count"),
        ({"tokenizer": "bytes"}, " has tokenizer = 'bytes', not a JSON dict"),
        ({"dtype": "float64"}, " has dtype = 'float64', not one of <u2, <u4"),
    ],
)
def test_a_value_of_the_wrong_type_is_named(corpus, changes, expected):
    _rewrite(corpus, **changes)
    _raises(corpus, re.escape(expected + AGAIN))


def test_a_missing_key_and_a_token_file_of_the_wrong_size_are_named(corpus):
    meta = read_meta(corpus)
    train = corpus / "train.bin"
    train.write_bytes(train.read_bytes()[:-3])
    with pytest.raises(CorruptFile) as info:
        open_split(corpus, "train")
    want = 2 * meta["train_tokens"]
    assert str(info.value) == (
        f"{train}: {want - 3} bytes, but meta.json says {meta['train_tokens']} <u2 tokens = "
        f"{want} bytes (a truncated or replaced file: prepare the corpus again)"
    )
    path = corpus / "meta.json"
    full = json.loads(path.read_text())
    del full["fingerprint"]
    path.write_text(json.dumps(full))
    _raises(corpus, " misses fingerprint" + AGAIN)

"""Tests for rope_lab.corpus: `corpus prepare` writes once, deterministically, never cuts a
document, and refuses bad input with a message naming it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rope_lab.cli import main
from rope_lab.corpus import CorpusError, open_split, prepare, read_meta
from rope_lab.corpus.tokenizers import bytes_tokenizer, token_byte_lengths

DOCS = {
    f"doc{i:02d}.txt": f"Document {i}: "
    + " ".join(f"word{(i * 7 + j) % 23}" for j in range(40 + i))
    for i in range(12)
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    return src


def _decode(tokens: np.ndarray, folder: Path) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).decode(tokens.tolist())


def test_prepare_twice_writes_once(folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "corpus"
    args = ["corpus", "prepare", str(folder), "--out", str(out), "--tokenizer", "bpe:300"]
    assert main([*args, "--quiet"]) == 0
    assert "written" in capsys.readouterr().out
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    assert main(args) == 0
    assert "up to date (same sources and tokenizer); nothing written" in capsys.readouterr().out
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_same_inputs_give_identical_files(folder: Path, tmp_path: Path) -> None:
    """bpe:N trained twice on the same text: byte-identical tokenizer and token files."""
    a = prepare([str(folder)], tmp_path / "a", "bpe:320", progress=False)
    b = prepare([str(folder)], tmp_path / "b", "bpe:320", progress=False)
    for name in ("train.bin", "eval.bin", "tokenizer.json", "meta.json"):
        assert (a.folder / name).read_bytes() == (b.folder / name).read_bytes(), name
    # at most N: a small text runs out of pairs to merge (290 here)
    assert 256 < a.meta["vocab_size"] <= 320 and a.meta["dtype"] == "<u2"


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe:300"])
def test_documents_are_never_cut_and_sizes_match(folder: Path, tmp_path: Path, tokenizer) -> None:
    """Each split decodes to whole documents joined by the separator; the held-out ones are the
    last documents; meta's token counts equal the files' sizes and its byte counts the text's;
    the tokens' byte lengths add up to those bytes."""
    done = prepare([str(folder)], tmp_path / "c", tokenizer, eval_fraction=0.25, progress=False)
    meta, names = done.meta, sorted(DOCS)
    n_eval = meta["eval_documents"]
    assert n_eval >= 1 and meta["train_documents"] + n_eval == len(DOCS)
    split_docs = {"train": names[: len(DOCS) - n_eval], "eval": names[len(DOCS) - n_eval :]}
    lengths = token_byte_lengths(bytes_tokenizer()) if tokenizer == "bytes" else None
    for split, docs in split_docs.items():
        tokens = np.asarray(open_split(done.folder, split))
        text = "".join(DOCS[d] + "\n\n" for d in docs)
        assert _decode(tokens, done.folder) == text
        assert meta[f"{split}_bytes"] == len(text.encode())
        size = (done.folder / f"{split}.bin").stat().st_size
        assert size == meta[f"{split}_tokens"] * 2
        if lengths is not None:
            np.testing.assert_array_equal(tokens, np.frombuffer(text.encode(), np.uint8))
            assert lengths.sum() == 256 and (lengths == 1).all()
    assert meta["bytes_per_token_exact"] is True
    assert set(meta) >= {"tokenizer", "sources", "document_separator", "fingerprint"}
    assert len(meta["sources"]) == len(DOCS) and len(meta["tokenizer"]["sha256"]) == 64


def test_a_lone_file_is_split_at_blank_lines_and_eval_sources_hold_out_whole(tmp_path) -> None:
    lone = tmp_path / "lone.txt"
    lone.write_text("alpha beta\n\ngamma delta\n\n\n\nepsilon zeta eta theta iota")
    done = prepare([str(lone)], tmp_path / "c", "bytes", eval_fraction=0.3, progress=False)
    assert done.meta["train_documents"] == 2 and done.meta["eval_documents"] == 1
    assert _decode(np.asarray(open_split(done.folder, "eval")), done.folder) == (
        "epsilon zeta eta theta iota\n\n"
    )
    held = tmp_path / "held.txt"
    held.write_text("held out")
    done = prepare([str(lone)], tmp_path / "d", "bytes", eval_sources=[str(held)], progress=False)
    assert done.meta["train_documents"] == 3 and done.meta["eval_tokens"] == len("held out\n\n")


def test_a_changed_source_replaces_the_corpus_only_when_asked(folder: Path, tmp_path) -> None:
    first = prepare([str(folder)], tmp_path / "c", "bytes", progress=False)
    (folder / "doc00.txt").write_text("changed text")
    with pytest.raises(CorpusError, match=r"holds another corpus \(tokenizer bytes;.*--overwrite"):
        prepare([str(folder)], tmp_path / "c", "bytes", progress=False)
    assert read_meta(tmp_path / "c") == first.meta
    again = prepare([str(folder)], tmp_path / "c", "bytes", progress=False, overwrite=True)
    assert again.status == "replaced" and again.meta["fingerprint"] != first.meta["fingerprint"]
    assert read_meta(tmp_path / "c") == again.meta


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_target_that_is_not_a_corpus_of_its_own_is_never_touched(folder, tmp_path) -> None:
    """A folder holding other files, a regular file, the source folder itself, a folder inside
    it or one holding it: each refused naming --out, with every file as it was."""
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "notes.txt").write_text("mine")
    (notes / "sub" / "x.txt").write_text("also mine")
    plain = tmp_path / "plain.txt"
    plain.write_text("a file")
    cases = [
        (notes, "holds files that are not a rope_lab corpus \\(notes.txt, sub\\)"),
        (plain, "a file, not a folder"),
        (folder, "overlaps the source"),
        (folder / "corpus", "overlaps the source"),
        (tmp_path, "overlaps the source"),
    ]
    before = _tree(tmp_path)
    for out, pattern in cases:
        with pytest.raises(CorpusError, match=rf"^--out {out}: {pattern}"):
            prepare([str(folder)], out, "bytes", progress=False)
        argv = ["corpus", "prepare", str(folder), "--out", str(out), "--tokenizer", "bytes"]
        argv.append("--overwrite")
        assert main(argv) == 1
    assert _tree(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_input_errors_name_what_is_wrong(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "c"
    cases = [
        ([str(tmp_path / "missing.txt")], "bytes", r"missing\.txt' does not exist"),
        ([str(tmp_path / "empty_dir")], "bytes", "holds no files"),
        ([str(folder)], "bpe:x", "N in bpe:N must be an integer"),
        ([str(folder)], f"bpe:{2**32}", "does not fit uint32"),
        ([str(folder)], str(tmp_path / "nope.json"), "not 'bytes', 'bpe:N' or an existing"),
        (["builtin:nothing"], "bytes", "unknown built-in corpus"),
    ]
    (tmp_path / "empty_dir").mkdir()
    for sources, tok, pattern in cases:
        with pytest.raises(CorpusError, match=pattern):
            prepare(sources, out, tok, progress=False)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"abc\x00def")
    with pytest.raises(CorpusError, match=r"model\.bin: holds NUL bytes at offset 3"):
        prepare([str(binary)], out, "bytes", progress=False)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1\.txt: not valid UTF-8 at byte 3"):
        prepare([str(latin)], out, "bytes", progress=False)
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "a.txt").write_text("  \n")
    (blank / "b.txt").write_text("\n\n")
    with pytest.raises(CorpusError, match="empty corpus: the train sources"):
        prepare([str(blank)], out, "bytes", progress=False)
    one = tmp_path / "one.txt"
    one.write_text("one section only")
    with pytest.raises(CorpusError, match=r"needs at least 2 documents .* hold 1"):
        prepare([str(one)], out, "bytes", progress=False)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert main(["corpus", "prepare", str(binary), "--out", str(out), "--tokenizer", "bytes"]) == 1


def test_a_truncated_bin_is_refused_naming_the_file(folder: Path, tmp_path: Path) -> None:
    done = prepare([str(folder)], tmp_path / "c", "bytes", progress=False)
    path = done.folder / "eval.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(CorpusError, match=r"eval\.bin: \d+ bytes, but meta.json says \d+ <u2"):
        open_split(done.folder, "eval")
    # prepare again repairs it (the sizes disagree, so the corpus is not up to date)
    assert prepare([str(folder)], tmp_path / "c", "bytes", progress=False).status == "replaced"
    assert json.loads((done.folder / "meta.json").read_text())["eval_tokens"] > 0


def test_bytes_tokenizer_json_maps_each_byte_to_its_value() -> None:
    """The written tokenizer.json of `bytes` encodes any text to its UTF-8 byte values."""
    text = "héllo wörld\n\t\x7f ✓ tabs\tand  spaces"
    ids = bytes_tokenizer().encode(text, add_special_tokens=False).ids
    assert ids == list(text.encode())


def test_builtin_python_docs_bytes_corpus_is_lm_text_s_text(tmp_path) -> None:
    """train + eval of the bytes corpus = the built-in text lm_text reads, plus one separator."""
    from rope_lab.tasks.corpora import builtin_text

    done = prepare(["builtin:python-docs"], tmp_path / "c", "bytes", progress=False)
    both = np.concatenate([open_split(done.folder, s) for s in ("train", "eval")])
    np.testing.assert_array_equal(both[:-2], builtin_text("builtin:python-docs"))


@pytest.mark.parametrize("name", ["python-source", "unicode-data"])
def test_builtin_corpora_split_between_pages(tmp_path: Path, name: str) -> None:
    """The eval split of a built-in corpus is its last pages whole (a module's source, a block
    of Unicode records), each followed by the separator; train is the pages before them."""
    from rope_lab.tasks.corpora import builtin_pages

    pages = builtin_pages(f"builtin:{name}")
    done = prepare([f"builtin:{name}"], tmp_path / "c", "bytes", progress=False)
    meta = json.loads((done.folder / "meta.json").read_text())
    n_eval = meta["eval_documents"]
    assert 1 <= n_eval < len(pages) and meta["train_documents"] == len(pages) - n_eval
    eval_bytes = open_split(done.folder, "eval").astype(np.uint8).tobytes()
    assert eval_bytes == "".join(p + "\n\n" for p in pages[-n_eval:]).encode()
    train_bytes = open_split(done.folder, "train").astype(np.uint8).tobytes()
    assert train_bytes.endswith((pages[-n_eval - 1] + "\n\n").encode())


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe:300"])
def test_prepare_streams_its_documents(tmp_path: Path, monkeypatch, tokenizer) -> None:
    """300 documents of ~100 bytes (a piece each), encoded 256 bytes at a time: at most 4
    pieces are alive at once (the encoder's chunk and the one being read), where holding the
    corpus keeps all 300; the files equal the text's bytes, and a lone file read 7 bytes at a
    time gives the same corpus as the folder of its sections."""
    import importlib
    import weakref

    from rope_lab.corpus import sources

    prep = importlib.import_module("rope_lab.corpus.prepare")  # the package exports prepare()

    class Doc(str):  # a str that can be watched by weak reference
        pass

    alive: weakref.WeakSet[Doc] = weakref.WeakSet()
    most = 0

    def watched(files):
        nonlocal most
        for piece, last in sources.pieces(files):
            d = Doc(piece)
            alive.add(d)
            most = max(most, len(alive))
            yield d, last

    texts = [f"document {i} " + "abcdefgh " * (8 + i % 5) for i in range(300)]
    src = tmp_path / "src"
    src.mkdir()
    for i, text in enumerate(texts):
        (src / f"{i:03d}.txt").write_text(text)
    monkeypatch.setattr(prep, "CHUNK_BYTES", 256)
    monkeypatch.setattr(prep, "pieces", watched)
    done = prepare([str(src)], tmp_path / "c", tokenizer, eval_fraction=0.1, progress=False)
    assert 2 <= most <= 4
    n_train = done.meta["train_documents"]
    assert n_train + done.meta["eval_documents"] == 300
    train = "".join(t + "\n\n" for t in texts[:n_train])
    assert _decode(np.asarray(open_split(done.folder, "train")), done.folder) == train
    assert done.meta["train_bytes"] == len(train.encode())

    monkeypatch.setattr(sources, "READ_BYTES", 7)
    lone = tmp_path / "lone.txt"
    lone.write_text("\n\n".join(texts))
    again = prepare([str(lone)], tmp_path / "d", tokenizer, eval_fraction=0.1, progress=False)
    for split in ("train", "eval"):
        a, b = (np.asarray(open_split(c.folder, split)) for c in (done, again))
        np.testing.assert_array_equal(a, b)

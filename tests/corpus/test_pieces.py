"""Tests for rope_lab.corpus.sources.pieces: documents reach the tokenizer in pieces of at most
PIECE_CHARS characters, cut at seams, and the corpus is the one whole documents give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rope_lab.corpus import open_split, prepare, sources

# words of at most 7 characters and gaps of at most 3 that start with ASCII whitespace: every
# 16 characters hold a seam
WORDS = ["don't", "x1", "42", "héllo", "日本語", "--", "...", "it's", "Ünïcode", "a\u3000b"]
WORDS.append("a\xa0b")
GAPS = [" ", " ", " ", "  ", "\t", "\n", " \n ", " \u3000", " \t", "\r\n", "\n\n", "\n\n\n"]
SPACE_GAPS = [g for g in GAPS if g.startswith(" ")]


def _text(seed: int, n_words: int, gaps: list[str] = GAPS) -> str:
    rng = np.random.default_rng(seed)
    words = rng.choice(WORDS, n_words)
    gaps = rng.choice(gaps, n_words)
    return "".join(w + g for w, g in zip(words.tolist(), gaps.tolist(), strict=True))


def _brute_cut(text: str, start: int, limit: int) -> int:
    end = min(start + limit, len(text))
    for spaces in (" ", "\t\n\r\f\v"):
        seams = [
            p
            for p in range(start + 1, min(end, len(text) - 1) + 1)
            if text[p] in spaces and not text[p - 1].isspace()
        ]
        if seams:
            return max(seams)
    return end


def test_a_piece_ends_at_the_last_seam_in_reach() -> None:
    """cut() equals a brute-force search: the last space after a non-space character within
    the limit, else the last other ASCII whitespace, else the limit (Unicode spaces such as
    U+3000 and U+00A0 count as spaces before a seam, never as a seam)."""
    rng = np.random.default_rng(1)
    alphabet = list("ab ,\t\n\u3000\xa0é")
    for _ in range(40):
        text = "".join(rng.choice(alphabet, 60).tolist())
        for start in range(0, 60, 7):
            for limit in range(1, 25):
                assert sources.cut(text, start, limit) == _brute_cut(text, start, limit), (
                    text,
                    start,
                    limit,
                )


def _files(tmp_path: Path, run: int, gaps: list[str] = GAPS) -> dict[str, Path]:
    """A folder of three files and a lone file of blank-line sections, some long, one blank
    and longer than a piece, one with a run of ``run`` spaces."""
    folder = tmp_path / f"folder{len(gaps)}"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text(_text(i, 150, gaps))
    lone = tmp_path / f"lone{len(gaps)}.txt"
    blank, spaced = " " * 50, "x" + " " * run + "y"
    lone.write_text(_text(7, 300, gaps) + f"\n\n{blank}\n\n{spaced}\n\nz")
    return {"folder": folder, "lone": lone}


def test_pieces_join_to_the_documents_and_fit_the_limit(tmp_path, monkeypatch) -> None:
    """With 16-character pieces and 5-byte reads, the pieces of each document join to the
    document read whole, no piece is longer than 16 characters, and most are cut (a seam or
    the limit), not whole documents."""
    files = {k: sources.expand([str(v)]) for k, v in _files(tmp_path, 50).items()}
    monkeypatch.setattr(sources, "PIECE_CHARS", 1 << 40)
    whole = {name: list(sources.documents(paths)) for name, paths in files.items()}
    monkeypatch.setattr(sources, "PIECE_CHARS", 16)
    monkeypatch.setattr(sources, "READ_BYTES", 5)
    for name, paths in files.items():
        found = list(sources.pieces(paths))
        assert max(len(p) for p, _ in found) <= 16
        assert len(found) > 2 * len(whole[name])
        joined, held = [], ""
        for piece, last in found:
            held += piece
            if last:
                joined.append(held)
                held = ""
        assert joined == whole[name] and held == ""
    # the blank section is skipped, read whole or in pieces
    assert len(whole["lone"]) == len(_text(7, 300).split("\n\n")) + 2


def _tokenizer_files(folder: Path, text: str) -> list[str]:
    """Two tokenizer.json files trained on ``text``: BERT's WordPiece (BertNormalizer, BERT
    pre-tokenizer) and a BPE over Metaspace."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    bert = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    bert.normalizer = normalizers.BertNormalizer()
    bert.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    unk = ["[UNK]"]
    bert.train_from_iterator([text], trainers.WordPieceTrainer(vocab_size=120, special_tokens=unk))
    meta = Tokenizer(models.BPE(unk_token="[UNK]"))
    meta.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    meta.train_from_iterator([text], trainers.BpeTrainer(vocab_size=120, special_tokens=unk))
    paths = []
    for name, tok in (("bert", bert), ("metaspace", meta)):
        tok.save(str(folder / f"{name}.json"))
        paths.append(str(folder / f"{name}.json"))
    return paths


def _corpus(src: Path, out: Path, tokenizer: str) -> dict[str, bytes]:
    done = prepare([str(src)], out, tokenizer, eval_fraction=0.3, progress=False)
    return {p.name: p.read_bytes() for p in done.folder.iterdir() if p.name != "meta.json"}


@pytest.mark.parametrize("source", ["folder", "lone"])
def test_pieces_cut_at_seams_give_the_whole_documents_tokens(tmp_path, monkeypatch, source):
    """bytes, bpe:300 (trained on the pieces) and BERT's WordPiece from a tokenizer.json: the
    corpus of 16-character pieces is byte for byte the corpus of whole documents (train.bin,
    eval.bin, tokenizer.json), though the text has hundreds of seams at spaces, tabs and
    newlines (and a blank section longer than a piece, skipped); a Metaspace tokenizer.json
    likewise where every seam is at a space."""
    tok_folder = tmp_path / "toks"
    tok_folder.mkdir()
    bert, metaspace = _tokenizer_files(tok_folder, _text(0, 400))
    general = _files(tmp_path, 10)
    cases = [(s, general) for s in ("bytes", "bpe:300", bert)]
    cases.append((metaspace, _files(tmp_path, 10, SPACE_GAPS)))
    for spec, files in cases:
        name = Path(spec).stem
        monkeypatch.setattr(sources, "PIECE_CHARS", 1 << 40)
        whole = _corpus(files[source], tmp_path / f"whole-{name}", spec)
        monkeypatch.setattr(sources, "PIECE_CHARS", 16)
        cut = _corpus(files[source], tmp_path / f"cut-{name}", spec)
        assert cut == whole, spec
        assert len(whole["train.bin"]) > 400


def test_a_stretch_without_seams_is_cut_at_the_limit_and_keeps_its_text(tmp_path, monkeypatch):
    """200 characters without whitespace, 16-character pieces: bytes gives the same ids as
    whole documents; a byte-level BPE decodes to the same text."""
    from tokenizers import Tokenizer

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("日本語テキスト" * 30 + " end")
    (src / "b.txt").write_text("abc" * 70)
    monkeypatch.setattr(sources, "PIECE_CHARS", 16)
    assert len(list(sources.pieces([str(src / "b.txt")]))) == 14
    for spec in ("bytes", "bpe:300"):
        done = prepare([str(src)], tmp_path / spec.replace(":", "_"), spec, progress=False)
        train = np.asarray(open_split(done.folder, "train")).tolist()
        if spec == "bytes":
            assert train == list(((src / "a.txt").read_text() + "\n\n").encode())
        tok = Tokenizer.from_file(str(done.folder / "tokenizer.json"))
        assert tok.decode(train) == (src / "a.txt").read_text() + "\n\n"


def test_python_docs_in_small_pieces_is_the_same_bpe_corpus(tmp_path, monkeypatch) -> None:
    """Real text (code, indentation, prose): builtin:python-docs cut into pieces of at most
    500 characters (~1000 pieces) gives a bpe:1024 corpus byte-identical to whole pages."""
    monkeypatch.setattr(sources, "PIECE_CHARS", 1 << 40)
    whole = _corpus(Path("builtin:python-docs"), tmp_path / "whole", "bpe:1024")
    monkeypatch.setattr(sources, "PIECE_CHARS", 500)
    assert len(list(sources.pieces(["builtin:python-docs"]))) > 900
    assert _corpus(Path("builtin:python-docs"), tmp_path / "cut", "bpe:1024") == whole


def test_one_long_line_reaches_the_tokenizer_in_pieces(tmp_path, monkeypatch) -> None:
    """A single 20,000-character line (one document), 256-character pieces: the BPE trainer
    and the encoder never get a text longer than a piece, and the corpus decodes to the line."""
    from tokenizers import Tokenizer

    from rope_lab.corpus import tokenizers as toks

    longest = {"train": 0, "encode": 0}
    train_bpe, encode = toks.train_bpe, toks.encode

    def watched_train(texts, size):
        def each():
            for text in texts:
                longest["train"] = max(longest["train"], len(text))
                yield text

        return train_bpe(each(), size)

    def watched_encode(tok, texts, kind):
        longest["encode"] = max(longest["encode"], *(len(t) for t in texts))
        return encode(tok, texts, kind)

    monkeypatch.setattr(toks, "train_bpe", watched_train)
    monkeypatch.setattr(toks, "encode", watched_encode)
    monkeypatch.setattr(sources, "PIECE_CHARS", 256)
    line = _text(3, 4000, SPACE_GAPS).replace("\n", " ")
    (tmp_path / "line.txt").write_text(line)
    (tmp_path / "held.txt").write_text("held out")
    done = prepare(
        [str(tmp_path / "line.txt")],
        tmp_path / "c",
        "bpe:300",
        eval_sources=[str(tmp_path / "held.txt")],
        progress=False,
    )
    assert len(line) > 20_000 and done.meta["train_documents"] == 1
    assert 200 < longest["train"] <= 256 and 200 < longest["encode"] <= 256
    tok = Tokenizer.from_file(str(done.folder / "tokenizer.json"))
    assert tok.decode(np.asarray(open_split(done.folder, "train")).tolist()) == line + "\n\n"

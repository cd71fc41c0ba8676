"""Tests for the fingerprint of `corpus prepare`: every option that changes the corpus changes
it (so a rerun never calls another corpus "up to date"), and the others leave it alone."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rope_lab.cli import build_parser, main
from rope_lab.corpus import read_meta


def _prepare_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = build_parser()
    for path in ("corpus", "prepare"):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[path]
    return parser


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    src, other = tmp_path / "src", tmp_path / "other"
    for folder, word in ((src, "alpha"), (other, "omega")):
        folder.mkdir()
        for i in range(6):
            (folder / f"{i}.txt").write_text(f"{word} {i} " + "lorem ipsum dolor " * (i + 3))
    (tmp_path / "held.txt").write_text("a held-out text of its own")
    return {"src": src, "other": other, "held": tmp_path / "held.txt"}


BASE = ["{src}", "--tokenizer", "bytes"]

# Every option of `corpus prepare` (by dest): the arguments that vary it from BASE, and whether
# that changes the corpus. An option missing here fails the test: list it, and enter it in the
# fingerprint if it changes what is written.
OPTIONS: dict[str, tuple[list[str], bool] | None] = {
    "sources": (["{other}", "--tokenizer", "bytes"], True),
    "tokenizer": (["{src}", "--tokenizer", "bpe:300"], True),
    "eval": ([*BASE, "--eval", "{held}"], True),
    "eval_fraction": ([*BASE, "--eval-fraction", "0.5"], True),
    "quiet": ([*BASE, "--quiet"], False),
    "overwrite": ([*BASE, "--overwrite"], False),
    "out": None,  # where the corpus goes, not what it holds
    "help": None,
}


def _run(args: list[str], out: Path, inputs: dict[str, Path], capsys) -> str:
    argv = ["corpus", "prepare", *(a.format(**inputs) for a in args), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_the_table_lists_every_option_of_corpus_prepare() -> None:
    assert {a.dest for a in _prepare_parser()._actions} == set(OPTIONS)


@pytest.mark.parametrize("option", [k for k, v in OPTIONS.items() if v is not None])
def test_an_option_that_changes_the_corpus_changes_its_fingerprint(
    option, tmp_path, inputs, capsys
) -> None:
    """Rerun into the same folder with the option varied: a corpus-changing option replaces
    the corpus with exactly what a fresh run writes, under another fingerprint; any other
    option finds the corpus up to date and leaves every file as it was."""
    args, changes = OPTIONS[option] or ([], False)
    out = tmp_path / "c"
    _run(BASE, out, inputs, capsys)
    before, base_fp = _files(out), read_meta(out)["fingerprint"]
    said = _run([*args, "--overwrite"] if changes else args, out, inputs, capsys)
    if changes:
        assert "replaced" in said and read_meta(out)["fingerprint"] != base_fp
        _run(args, tmp_path / "fresh", inputs, capsys)
        assert _files(out) == _files(tmp_path / "fresh") != before
    else:
        assert "up to date" in said and _files(out) == before


def test_another_eval_fraction_is_a_new_split(tmp_path, inputs, capsys) -> None:
    """0.1 given equals the default; 0.5 is refused without --overwrite (naming it, the corpus
    untouched) and with it holds out more documents; a tokenizer.json rewritten in place is a
    new corpus too."""
    out = tmp_path / "c"
    _run(BASE, out, inputs, capsys)
    first = read_meta(out)
    assert "up to date" in _run([*BASE, "--eval-fraction", "0.1"], out, inputs, capsys)
    argv = ["corpus", "prepare", str(inputs["src"]), "--out", str(out), "--tokenizer", "bytes"]
    assert main([*argv, "--eval-fraction", "0.5"]) == 1
    assert "holds another corpus" in capsys.readouterr().err and read_meta(out) == first
    assert main([*argv, "--eval-fraction", "0.5", "--overwrite"]) == 0
    second = read_meta(out)
    assert second["eval_documents"] > first["eval_documents"] and second["eval_fraction"] == 0.5

    tok = tmp_path / "tok.json"
    tok.write_bytes((out / "tokenizer.json").read_bytes())
    _run(["{src}", "--tokenizer", str(tok)], tmp_path / "d", inputs, capsys)
    fp = read_meta(tmp_path / "d")["fingerprint"]
    _run(["{src}", "--tokenizer", "bpe:300"], tmp_path / "e", inputs, capsys)
    tok.write_bytes((tmp_path / "e" / "tokenizer.json").read_bytes())
    said = _run(["{src}", "--tokenizer", str(tok), "--overwrite"], tmp_path / "d", inputs, capsys)
    assert "replaced" in said and read_meta(tmp_path / "d")["fingerprint"] != fp

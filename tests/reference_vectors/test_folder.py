"""The folder: README.md and manifest.json describe every file and column, and
`rope-lab reference-vectors` refuses a non-empty folder and writes atomically."""

from __future__ import annotations

import json

import pytest

from rope_lab import reference_vectors as rv
from rope_lab.cli import main
from tests.reference_vectors.conftest import read_table


def test_readme_and_manifest_describe_every_file_and_column(written):
    text = (written / "README.md").read_text()
    manifest = json.loads((written / "manifest.json").read_text())
    for t in rv.TABLES.values():
        assert f"`{t.file}`" in text
        frame = read_table(written, t.name)
        assert list(frame.columns) == list(t.columns)
        for col in frame.columns:
            assert f"- `{col}`:" in text, (t.name, col)
        assert manifest["files"][t.file]["rows"] == frame.height
    for name in rv.PLANNED:
        assert (f"`{name}.parquet`: not yet present" in text) == (name not in rv.TABLES)
    assert manifest["rope_lab_version"] == __import__("rope_lab").__version__
    assert {f for f in manifest["files"]} == {
        p.relative_to(written).as_posix() for p in written.rglob("*") if p.is_file()
    } - {"manifest.json"}
    assert len(manifest["cases"]) == read_table(written, "cases").height


def test_refuses_a_non_empty_folder_and_writes_atomically(written, tmp_path, capsys, monkeypatch):
    out = tmp_path / "vectors"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["reference-vectors", "--out", str(out), "--methods", "default"]) == 1
    assert "not empty (pass --overwrite" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert main(["reference-vectors", "--out", str(tmp_path / "new"), "--methods", "nope"]) == 1
    assert "unknown RoPE scaling method 'nope'" in capsys.readouterr().err

    def broken(v):
        raise RuntimeError("table failed")

    monkeypatch.setitem(rv.TABLES, "broken", rv.Table("broken", "", {}, broken))
    with pytest.raises(RuntimeError, match="table failed"):
        rv.write(out, overwrite=True, methods=("default",))
    assert [p.name for p in out.iterdir()] == ["keep.txt"]  # the old folder untouched
    assert [p.name for p in tmp_path.iterdir()] == ["vectors"]  # no temporary left
    monkeypatch.delitem(rv.TABLES, "broken")
    assert (
        main(["reference-vectors", "--out", str(out), "--overwrite", "--methods", "default"]) == 0
    )
    assert not (out / "keep.txt").exists() and (out / "README.md").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["vectors"]
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is taken as it is
    assert main(["reference-vectors", "--out", str(empty), "--methods", "default"]) == 0
    assert set(read_table(empty, "cases")["method"]) == {"default"}

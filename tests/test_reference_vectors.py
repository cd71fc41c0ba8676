"""`rope-lab reference-vectors`: the frequency tables against Hugging Face (the golden file and,
where importable, transformers itself), cos/sin against a NumPy float64 recomputation, the
logits against a fresh forward of the saved checkpoint, and the folder's refusal and atomicity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rope_lab import reference_vectors as rv
from rope_lab.cli import main
from rope_lab.registry import SCALINGS

GOLDEN = Path(__file__).parent / "fixtures" / "hf_rope_golden.json"


def _frequency_methods() -> tuple[str, ...]:
    """Every registered method but the position remaps (which keep direct RoPE's frequencies
    and compile a program of their own each: the slow test writes them)."""
    return tuple(n for n in SCALINGS.names() if not getattr(SCALINGS[n], "remaps", False))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rv") / "vectors"
    return rv.write(out, methods=_frequency_methods())


def _read(folder: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(folder / f"{name}.parquet")


def _freqs(folder: Path) -> dict[str, np.ndarray]:
    inv = _read(folder, "inv_freq").sort("case_id", "index")
    return {k[0]: g["inv_freq"].to_numpy() for k, g in inv.group_by("case_id", maintain_order=True)}


def test_every_registered_method_has_grid_and_model_cases():
    cases = rv.grid_cases()
    assert {c.method for c in cases} == set(SCALINGS.names())
    assert {c.method for c in rv.model_cases()} == set(SCALINGS.names())
    assert len({c.case_id for c in cases}) == len(cases)
    for c in cases:  # every case is valid for its method
        c.frequencies()
    # length-dependent methods: seq_len below, at and above the training length
    for method in SCALINGS.names():
        if SCALINGS[method].length_dependent:
            seqs = {c.seq_len for c in cases if c.method == method and c.note == "base"}
            assert {None, 1024, 2047, 2048, 2049, 4096, 8192, 32768} <= seqs, method


def test_a_required_field_without_an_example_is_named(monkeypatch):
    monkeypatch.delitem(rv.REQUIRED_EXAMPLES, "long_factor")
    with pytest.raises(ValueError, match=r"'longrope': required field 'long_factor'"):
        rv.grid_cases(("longrope",))


def _golden_key(kind, rotary_dim, head_dim, theta, factor, length, seq_len, params):
    cls = SCALINGS[kind]
    return json.dumps(
        [kind, rotary_dim, head_dim, float(theta), float(factor) if cls.uses_factor else None,
         length if cls.needs_original_length else None, seq_len, rv._plain(params)],
        sort_keys=True,
    )  # fmt: skip


def test_frequency_tables_equal_the_hugging_face_golden_cases(written):
    """Each golden case (transformers 5.24.0's outputs) that the grid holds: the same float32
    frequencies (within 3 ulps) and attention factor; every golden method and most yarn /
    llama3 edge cases are held."""
    golden = json.loads(GOLDEN.read_text())["cases"]
    cases = _read(written, "cases").filter(pl.col("group") == "grid")
    freqs = _freqs(written)
    by_key = {
        _golden_key(r["method"], r["rotary_dim"], r["head_dim"], r["theta"], r["factor"],
                    r["original_length"], r["seq_len"], json.loads(r["params"])): r
        for r in cases.iter_rows(named=True)
    }  # fmt: skip
    matched: dict[str, int] = {}
    for g in golden:
        key = _golden_key(g["kind"], g["rotary_dim"], g["hf"]["head_dim"], g["theta"],
                          g["factor"], g["original_length"], g["seq_len"], g["params"])  # fmt: skip
        row = by_key.get(key)
        if row is None:
            continue
        matched[g["kind"]] = matched.get(g["kind"], 0) + 1
        # rope_lab takes theta ** -(2i/d) in float64, torch in float32: within 3 float32 ulps
        np.testing.assert_allclose(
            freqs[row["case_id"]], np.asarray(g["inv_freq"], np.float32), rtol=4e-7, atol=0,
            err_msg=key,
        )  # fmt: skip
        assert row["attention_factor"] == pytest.approx(g["attention_factor"], rel=1e-12), key
    assert set(matched) >= {"default", "linear", "dynamic", "yarn", "llama3", "proportional"}
    assert matched["yarn"] >= 17 and matched["llama3"] >= 6 and matched["dynamic"] >= 6
    assert sum(matched.values()) >= 40, matched


def test_ntk_by_parts_rows_are_the_yarn_rows_with_attention_factor_one(written):
    cases = _read(written, "cases").filter(pl.col("group") == "grid")
    freqs = _freqs(written)
    cols = ["rotary_dim", "head_dim", "theta", "factor", "original_length", "params"]
    yarn = {tuple(r[c] for c in cols): r for r in cases.filter(method="yarn").iter_rows(named=True)}
    n = 0
    for r in cases.filter(method="ntk_by_parts").iter_rows(named=True):
        twin = yarn[tuple(r[c] for c in cols)]
        np.testing.assert_array_equal(freqs[r["case_id"]], freqs[twin["case_id"]])
        assert r["attention_factor"] == 1.0
        hf = json.loads(r["hf_config"])["rope_parameters"]
        assert hf["rope_type"] == "yarn" and hf["attention_factor"] == 1.0
        n += 1
    assert n >= 15


def test_edge_cases_hold_their_hand_computed_values(written):
    cases = _read(written, "cases").filter(pl.col("group") == "grid", method="yarn")
    notes = {r["note"]: r for r in cases.iter_rows(named=True)}
    ratio = notes["mscale: attention factor mscale(s, 1) / mscale(s, 0.5)"]
    want = (0.1 * math.log(40.0) + 1) / (0.1 * 0.5 * math.log(40.0) + 1)
    assert ratio["attention_factor"] == pytest.approx(want, rel=1e-15)
    zero = notes["mscale: mscale 0 counts as unset (HF tests truthiness): 0.1 ln s + 1"]
    assert zero["attention_factor"] == pytest.approx(0.1 * math.log(4.0) + 1, rel=1e-15)
    wins = notes["attention_factor: explicit attention_factor wins over mscale"]
    assert wins["attention_factor"] == 0.8
    # original vs max position embeddings: yarn's HF config stretches max_position_embeddings
    hf = json.loads(notes["base"]["hf_config"])
    assert hf["max_position_embeddings"] == 8192
    assert hf["rope_parameters"]["original_max_position_embeddings"] == 2048
    dynamic = _read(written, "cases").filter(method="dynamic", note="base", seq_len=4096)
    hf = json.loads(dynamic["hf_config"][0])  # HF's dynamic reads L from max_position_embeddings
    assert hf["max_position_embeddings"] == 2048
    assert "original_max_position_embeddings" not in hf["rope_parameters"]
    # the clamped ramp: huge length, small theta: the low bound (40) lies above the high one
    # clamped to d - 1 = 31, so the ramp is 1 everywhere and every frequency divided by 8
    huge = notes["beta_fast: huge length, small theta: bounds clamped to d - 1 (not d/2 - 1)"]
    inv = _freqs(written)[huge["case_id"]]
    np.testing.assert_allclose(inv, 100.0 ** -(np.arange(0, 32, 2) / 32) / 8, rtol=2e-6)


def test_hf_configs_reproduce_the_frequencies_in_transformers(written):
    """Every case with an hf_config, run through transformers' own RoPE init functions."""
    from tests.hf.conftest import transformers_or_skip

    _, transformers = transformers_or_skip()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = _read(written, "cases").filter(pl.col("hf_config").is_not_null())
    freqs = _freqs(written)
    n = 0
    for r in cases.iter_rows(named=True):
        hf = json.loads(r["hf_config"])
        rope = dict(hf["rope_parameters"])
        kind = rope["rope_type"]
        if kind == "default":  # Llama's default ignores partial_rotary_factor; linear x 1 reads it
            rope.update(rope_type="linear", factor=1.0)
        cfg = transformers.LlamaConfig(
            hidden_size=hf["head_dim"] * 2, num_attention_heads=2, head_dim=hf["head_dim"],
            max_position_embeddings=hf["max_position_embeddings"], rope_parameters=rope,
            num_hidden_layers=1, intermediate_size=8, vocab_size=8,
        )  # fmt: skip
        inv, att = ROPE_INIT_FUNCTIONS[rope["rope_type"]](cfg, None, seq_len=r["seq_len"])
        # torch's float32 pow differs from NumPy's (and between CPU SIMD levels) by 1-2 ulps;
        # YaRN's ramp and Llama 3's smoothing amplify a 1-ulp change by up to ~2 x factor
        rtol = 2**-23 * (4 + 2 * r["factor"])
        np.testing.assert_allclose(
            freqs[r["case_id"]], inv.numpy(), rtol=rtol, atol=0, err_msg=r["case_id"]
        )
        assert float(att) == pytest.approx(r["attention_factor"], rel=1e-12), r["case_id"]
        n += 1
    assert n >= 150


def test_cos_sin_equal_a_numpy_float64_recomputation(written):
    table = _read(written, "cos_sin")
    inv = _read(written, "inv_freq").rename({"inv_freq": "f"})
    t = table.join(inv, on=["case_id", "index"], how="left")
    assert t["f"].null_count() == 0
    pos = t["position"].to_numpy().astype(np.float64)
    f = t["f"].to_numpy().astype(np.float64)
    exact = pos * f  # exact in float64: 24-bit x 24-bit mantissas
    np.testing.assert_array_equal(t["angle_exact"].to_numpy(), exact)
    angle = t["angle"].to_numpy()
    # a float32 multiply of float32(position): exact in float64, then rounded once
    pos32 = pos.astype(np.float32).astype(np.float64)  # positions above 2^24 round first
    assert (pos32 != pos).any()  # s x L - 1 = 79999999 of the huge-length YaRN case
    np.testing.assert_array_equal(angle, (pos32 * f).astype(np.float32))
    bound = np.spacing(np.abs(angle)) / 2 + np.abs(pos32 - pos) * f
    assert np.all(np.abs(angle - exact) <= bound)
    for fn, col in ((np.cos, "cos"), (np.sin, "sin")):
        np.testing.assert_allclose(t[f"{col}_exact"].to_numpy(), fn(exact), rtol=0, atol=1e-15)
        got = t[col].to_numpy().astype(np.float64)
        want = fn(angle.astype(np.float64))
        assert np.all(np.abs(got - want) <= np.spacing(np.float32(1)) / 2 * np.maximum(
            np.abs(want), 2**-126))  # fmt: skip
        # float32's angle costs at most its distance from the exact product
        gap = np.abs(got - fn(exact))
        assert np.all(gap <= np.abs(angle - exact) + 2**-24), col
    # positions: the fixed set plus each case's L - 1, L and s x L - 1
    first = table.filter(case_id="yarn-000")  # d 64, theta 1e4, factor 4, L 2048
    assert sorted(set(first["position"])) == [0, 1, 100, 2047, 2048, 4095, 4096, 8191, 32767,
                                              131071]  # fmt: skip
    # pinned: frequency 0 of direct RoPE is 1, so the angle is the position itself
    row = table.filter(case_id="default-000", position=131071, index=0).row(0, named=True)
    assert row["angle"] == 131071.0 and row["cos"] == np.float32(math.cos(131071.0))
    # frequency 1 (10000 ** -(1/32)) at 131071: the float32 product is off the exact one
    row = table.filter(case_id="default-000", position=131071, index=1).row(0, named=True)
    assert row["angle"] != row["angle_exact"]
    assert abs(row["angle"] - row["angle_exact"]) <= 2**-7 / 2


def test_logits_reload_and_equal_a_fresh_forward_of_the_saved_model(written):
    from rope_lab.hf import from_hf

    model = from_hf(written / "model")
    logits = _read(written, "logits")
    manifest = json.loads((written / "manifest.json").read_text())
    tokens = np.asarray(manifest["model"]["tokens"], np.int32)
    cases = {c.case_id: c for c in rv.model_cases(_frequency_methods())}
    assert set(logits["case_id"]) == set(cases)
    n = 0
    for (case_id, length), g in logits.group_by("case_id", "length", maintain_order=True):
        g = g.sort("position")
        np.testing.assert_array_equal(g["token"].to_numpy(), tokens[:length])
        fresh = rv.logits_under(model, cases[case_id], tokens[:length])
        np.testing.assert_allclose(np.stack(g["logits"].to_list()), fresh, rtol=1e-5, atol=1e-5)
        n += 1
    assert n == 3 * len(cases) - 2 * sum(c.seq_len is not None for c in cases.values())
    # the scalings change the logits past the training length, not the weights
    at = lambda c: np.stack(logits.filter(case_id=c, length=128)["logits"].to_list())
    assert np.abs(at("model-yarn") - at("model-default")).max() > 0.1
    assert np.abs(at("model-default")).mean() > 0.5  # O(1) logits


def test_readme_and_manifest_describe_every_file_and_column(written):
    text = (written / "README.md").read_text()
    manifest = json.loads((written / "manifest.json").read_text())
    for t in rv.TABLES.values():
        assert f"`{t.file}`" in text
        frame = _read(written, t.name)
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
    assert len(manifest["cases"]) == _read(written, "cases").height


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
    assert set(_read(empty, "cases")["method"]) == {"default"}


@pytest.mark.slow
def test_every_method_written_and_hf_methods_match_transformers_logits(tmp_path):
    """The command as run (every registered method, remaps included); the logits of every
    method with an hf_config equal transformers' forward of DIR/model under that config."""
    from tests.hf.conftest import transformers_or_skip

    torch, transformers = transformers_or_skip()
    out = tmp_path / "vectors"
    assert main(["reference-vectors", "--out", str(out)]) == 0
    cases = _read(out, "cases")
    assert set(cases["method"]) == set(SCALINGS.names())
    logits = _read(out, "logits")
    config = json.loads((out / "model" / "config.json").read_text())
    n = 0
    for r in cases.filter(group="model").iter_rows(named=True):
        if r["hf_config"] is None:
            continue
        hf = json.loads(r["hf_config"])
        cfg = transformers.AutoConfig.for_model(
            **{**config, "max_position_embeddings": hf["max_position_embeddings"],
               "rope_parameters": hf["rope_parameters"]}
        )  # fmt: skip
        model = transformers.AutoModelForCausalLM.from_pretrained(out / "model", config=cfg)
        for length, g in logits.filter(case_id=r["case_id"]).group_by("length"):
            g = g.sort("position")
            with torch.no_grad():
                want = model(torch.as_tensor(g["token"].to_numpy()[None])).logits[0].numpy()
            got = np.stack(g["logits"].to_list())
            assert np.abs(got - want).max() / np.abs(want).max() < 1e-4, (r["case_id"], length)
            n += 1
    assert n >= 12


def test_position_remaps_are_the_papers_relative_positions():
    """Every row of position_remaps: its relative position equals the paper's definition
    (tests/model/scalings/test_remaps.py's transcriptions) at the resolved parameters, and
    the remap edge cases are there (window 1 clamps every pair but the diagonal)."""
    from tests.model.scalings import test_remaps as papers

    remaps = tuple(n for n in SCALINGS.names() if SCALINGS[n].remaps)
    vectors = rv.Vectors(methods=remaps)
    frame = rv.TABLES["position_remaps"].build(vectors)
    assert set(frame["method"].unique()) == set(remaps)
    assert list(frame.columns) == list(rv.TABLES["position_remaps"].columns)
    cases = {c.case_id: c for c in vectors.cases}
    paper = {
        "rerope": lambda i, j, p, c: papers.rerope(i, j, p["window"]),
        "leaky_rerope": lambda i, j, p, c: papers.leaky_rerope(i, j, p["window"], c.factor),
        "self_extend": lambda i, j, p, c: papers.self_extend(i, j, p["group"], p["window"]),
        "dual_chunk": lambda i, j, p, c: papers.dual_chunk(
            i, j, p["chunk_size"], p["local_window"]
        ),
        "string": lambda i, j, p, c: papers.string(i, j, p["shift"], p["local_window"]),
    }  # fmt: skip
    for (case_id, resolved), rows in frame.group_by("case_id", "resolved"):
        c = cases[case_id]
        i, j = rows["query_position"].to_numpy(), rows["key_position"].to_numpy()
        want = paper[c.method](i, j, json.loads(resolved), c)
        np.testing.assert_allclose(rows["relative"].to_numpy(), want, rtol=1e-6, err_msg=case_id)
    narrow = frame.filter(pl.col("resolved") == '{"slope": 0.0, "window": 1}')
    assert (narrow.filter(pl.col("query_position") > pl.col("key_position"))["relative"] == 1).all()

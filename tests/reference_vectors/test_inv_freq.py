"""The `inv_freq` table (with the attention factors of `cases`) against Hugging Face: the
golden file of transformers 5.24.0, and ntk_by_parts as yarn with attention factor 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rope_lab import reference_vectors as rv
from rope_lab.registry import SCALINGS
from tests.reference_vectors.conftest import inv_freqs, read_table

GOLDEN = Path(__file__).parents[1] / "fixtures" / "hf_rope_golden.json"


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
    cases = read_table(written, "cases").filter(pl.col("group") == "grid")
    freqs = inv_freqs(written)
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
    cases = read_table(written, "cases").filter(pl.col("group") == "grid")
    freqs = inv_freqs(written)
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

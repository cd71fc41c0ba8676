"""The `cases` table: the edge cases hold their hand-computed attention factors, frequencies and
HF config fields, and every hf_config reproduces the frequencies in transformers itself."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from tests.reference_vectors.conftest import inv_freqs, read_table


def test_edge_cases_hold_their_hand_computed_values(written):
    cases = read_table(written, "cases").filter(pl.col("group") == "grid", method="yarn")
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
    dynamic = read_table(written, "cases").filter(method="dynamic", note="base", seq_len=4096)
    hf = json.loads(dynamic["hf_config"][0])  # HF's dynamic reads L from max_position_embeddings
    assert hf["max_position_embeddings"] == 2048
    assert "original_max_position_embeddings" not in hf["rope_parameters"]
    # the clamped ramp: huge length, small theta: the low bound (40) lies above the high one
    # clamped to d - 1 = 31, so the ramp is 1 everywhere and every frequency divided by 8
    huge = notes["beta_fast: huge length, small theta: bounds clamped to d - 1 (not d/2 - 1)"]
    inv = inv_freqs(written)[huge["case_id"]]
    np.testing.assert_allclose(inv, 100.0 ** -(np.arange(0, 32, 2) / 32) / 8, rtol=2e-6)


def test_hf_configs_reproduce_the_frequencies_in_transformers(written):
    """Every case with an hf_config, run through transformers' own RoPE init functions."""
    from tests.hf.conftest import transformers_or_skip

    _, transformers = transformers_or_skip()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = read_table(written, "cases").filter(pl.col("hf_config").is_not_null())
    freqs = inv_freqs(written)
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

"""The `logits` table against a fresh forward of the saved checkpoint and, for every method with
an hf_config, against transformers' forward of it (-m slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rope_lab import reference_vectors as rv
from rope_lab.cli import main
from rope_lab.registry import SCALINGS
from tests.reference_vectors.conftest import frequency_methods, read_table


def test_logits_reload_and_equal_a_fresh_forward_of_the_saved_model(written):
    from rope_lab.hf.weights import from_hf

    model = from_hf(written / "model")
    logits = read_table(written, "logits")
    manifest = json.loads((written / "manifest.json").read_text())
    tokens = np.asarray(manifest["model"]["tokens"], np.int32)
    cases = {c.case_id: c for c in rv.model_cases(frequency_methods())}
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


@pytest.mark.slow
def test_every_method_written_and_hf_methods_match_transformers_logits(tmp_path):
    """The command as run (every registered method, remaps included); the logits of every
    method with an hf_config equal transformers' forward of DIR/model under that config."""
    from tests.hf.conftest import transformers_or_skip

    torch, transformers = transformers_or_skip()
    out = tmp_path / "vectors"
    assert main(["reference-vectors", "--out", str(out)]) == 0
    cases = read_table(out, "cases")
    assert set(cases["method"]) == set(SCALINGS.names())
    logits = read_table(out, "logits")
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

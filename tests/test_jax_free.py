"""The driver's configuration side never imports JAX or Equinox: loading every shipped sweep
spec, `sweep plan`'s table, listing every registry and validating the example trial run in a
fresh interpreter and leave `jax` and `equinox` out of `sys.modules` (each registered
variant's config lives apart from its Equinox module or JAX sampler, which its `build`
imports)."""

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.shipped_specs import NEEDS_DATA

REPO = Path(__file__).resolve().parents[1]

CHECK = """
import json, sys
from pathlib import Path

from rope_lab import registry
from rope_lab.config import load_trial, validate
from rope_lab.sweep.plan_table import plan_table
from rope_lab.sweep.spec import load_spec

needs_data = set(json.loads(sys.argv[1]))
loaded, skipped = [], {}
for path in sorted(Path("sweeps").glob("*.yaml")):
    try:
        load_spec(path)
        loaded.append(path.name)
    except Exception as err:
        if path.name not in needs_data:
            raise
        skipped[path.name] = str(err)
table = plan_table(load_spec("sweeps/smoke.yaml"))
kinds = (registry.POSITIONS, registry.SCALINGS, registry.TASKS, registry.MODELS,
         registry.ATTENTION_FNS)
entries = {r.what: [name for name, _ in r.items()] for r in kinds}
validate(load_trial("examples/rope_passkey.yaml"))
from rope_lab.config import TrialConfig, from_dict
pretrained = validate(from_dict(TrialConfig, {"model": {"init": {"hf": sys.argv[2]}},
                                              "eval": {"length_multipliers": [1, 2]}}))
print(json.dumps({
    "jax": "jax" in sys.modules,
    "equinox": "equinox" in sys.modules,
    "loaded": loaded,
    "skipped": skipped,
    "table_lines": len(table.splitlines()),
    "pretrained": [pretrained.model.width, pretrained.model.n_kv_heads, pretrained.train.length],
    "entries": entries,
}))
"""


# a Llama checkpoint's config.json: validation of a trial from it reads only this file
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 40,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "max_position_embeddings": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def test_specs_plans_registries_and_validation_import_no_jax(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    out = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(sorted(NEEDS_DATA)), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["jax"] and not got["equinox"]
    # a spec is skipped only for the data it names as missing
    assert set(got["skipped"]) <= NEEDS_DATA
    for name, error in got["skipped"].items():
        assert "corpus" in error or "checkpoint" in error or "no such local folder" in error, name
    assert "smoke.yaml" in got["loaded"] and len(got["loaded"]) >= 8
    assert got["table_lines"] > 2
    entries = got["entries"]
    assert "rope" in entries["position encoding"] and "yarn" in entries["RoPE scaling method"]
    assert "passkey" in entries["task"] and "transformer" in entries["model family"]
    assert entries["attention variant"][:2] == ["softmax", "sinks"]
    assert {"gated", "gated_head"} <= set(entries["attention variant"])
    assert got["pretrained"] == [32, 2, 64]

"""A CNN trial (`model.family: cnn`) through the sweep runner, NTK tracking on, beside a
Transformer: eval rows, NTK rows of its own parameter groups, its label and receptive field in
the trials table and in `sweep plan`."""

import polars as pl
import pytest
import yaml

from rope_lab.analysis.query import eval_table
from rope_lab.config import ConfigError
from rope_lab.results import load
from rope_lab.sweep.plan_table import plan_table
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from tests.sweep.conftest import write_spec
from tests.tasks.common import task_module

CNN = {"family": "cnn", "cnn": {"kernel_size": 2, "dilations": [1, 2]}}


@pytest.mark.slow  # ~21 s on 2 cores
def test_a_cnn_runs_through_the_sweep_with_ntk_tracking(tmp_path):
    """Width 16, depth 2 (receptive field 4), L_train 8, 2 steps, on passkey and on a text
    (one vocabulary, so the two trials share their compiled programs); eval scalings and
    fine-tuning on a grid of CNNs only are refused, naming the family. The plan shows its
    receptive field, and '-' for a Transformer."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(32, 127)) * 40)
    tasks = ["passkey", "lm_text"]
    spec_path = write_spec(
        tmp_path,
        base__model={"depth": 2, "width": 16, "head_dim": 32, **CNN},
        base__task={"vocab_size": 256},
        base__train={"length": 8, "batch_size": 2, "steps": 2, "warmup_steps": 1},
        base__eval={
            "length_multipliers": [1, 2],
            "batches": 1,
            "batch_size": 2,
            "position_buckets": 2,
        },
        base__ntk={
            "enabled": True,
            "probes": 2,
            "probe_multipliers": [2],
            "steps": [0, 2],
            "position_probes": 1,
            "pad_to_longest": True,
        },
        zip=[
            {
                "task.name": tasks,
                "task.params": [task_module(t).tiny_params(str(corpus)) for t in tasks],
            }
        ],
        grid={},
        scaling=None,
    )
    spec = load_spec(spec_path)
    scaled = yaml.safe_load(spec_path.read_text())
    scaled["scaling"] = {"methods": ["linear"], "factors": [2]}
    (tmp_path / "scaled.yaml").write_text(yaml.safe_dump(scaled))
    with pytest.raises(ConfigError, match=r"scaling: used by no trial, .* model.family 'cnn'"):
        load_spec(tmp_path / "scaled.yaml")
    assert [t.model.receptive_field for t in spec.trials] == [4, 4]
    beside = [{"model.family": ["cnn", "transformer"], "model.head_dim": [32, 16]}]
    with_rope = load_spec(write_spec(tmp_path, zip=beside, grid={}))
    table = plan_table(with_rope, flops_per_s=1e9).splitlines()
    end = table[1].index(" RF ") + 3  # cells are right-aligned under their column name
    assert [line[:end].split()[-1] for line in table[3:5]] == ["3", "-"]  # depth 1, k 3

    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    res = load(tmp_path / "runs" / "tiny")
    trials = res.trials.collect()
    assert summary.count("done") == 2, trials["error"].to_list()
    assert trials["family.label"].to_list() == ["CNN k2 d1,2"] * 2
    assert trials["family.receptive_field"].to_list() == [4, 4]
    assert trials["model.cnn.kernel_size"].to_list() == [2, 2]

    ev = eval_table(tmp_path / "runs" / "tiny", whole_sequence=False)
    whole = ev.filter(pl.col("position_bucket").is_null())
    assert sorted(whole["length"]) == [8, 8, 16, 16] and whole["loss"].is_finite().all()
    assert set(ev["method"]) == {"none"} and set(ev["label"]) == {"CNN k2 d1,2"}

    ntk = res.ntk.collect()
    for tid in trials["trial_id"]:
        rows = ntk.filter(pl.col("trial_id") == tid)
        assert set(rows["step"]) == {0, 2}
        assert set(rows["group"]) == {"total", "embedding", "conv", "mlp", "norms", "head"}
        shift = rows.filter(pl.col("metric") == "shift_invariance_error")
        assert len(shift) > 0 and (shift["value"].abs() < 1e-6).all()

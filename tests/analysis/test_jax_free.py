"""Loading a run directory, labelling its curves, querying it and judging the claims on it never
import JAX, nor even the
encoding and task registries: trials rows carry what analysis needs to know of their variants
(`results.columns.variant_columns`). The driver side is tests/test_jax_free.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rope_lab.config import replace, validate
from rope_lab.trial.run import run_trial
from tests.helpers import tiny_trial

READ = """
import json, sys
import polars as pl
from rope_lab.results import load
from rope_lab.analysis import query
from rope_lab.analysis.claims import format_verdicts, judge

res = load(sys.argv[1])
frame = query.eval_table(res)
labels = sorted(set(frame.get_column("label").to_list()))
summary = query.extrapolation_summary(res)
metrics = query.task_metrics(frame)
registry = "rope_lab.model.positions" in sys.modules or "rope_lab.tasks" in sys.modules
verdicts = format_verdicts(judge([sys.argv[1]], None, min_seeds=1, n_boot=50))  # may list tasks
print(json.dumps({
    "jax": "jax" in sys.modules,
    "equinox": "equinox" in sys.modules,
    "registry": registry,
    "labels": labels,
    "summary_rows": summary.height,
    "metrics": {str(k): v for k, v in metrics.items()},
    "verdict_lines": len(verdicts.splitlines()),
}))
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One partial-RoPE trial (a field off its default, so the label must name it)."""
    run = tmp_path_factory.mktemp("jax_free")
    cfg = replace(
        tiny_trial("rope", steps=4),
        **{"model.position.rope.rotary_fraction": 0.5, "ntk.enabled": False},
    )
    run_trial(validate(cfg), run)
    return run


def test_loading_labelling_querying_and_claims_import_no_jax(run_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", READ, str(run_dir)], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["jax"] and not got["equinox"] and not got["registry"]
    assert "rope rotary_fraction 0.5" in got["labels"]
    assert "rope rotary_fraction 0.5/linear x2" in got["labels"]
    assert got["summary_rows"] > 0
    assert got["metrics"] == {"passkey": "accuracy"}
    assert got["verdict_lines"] > 2  # every registered claim judged (most: not enough runs)


def test_trials_rows_describe_their_encoding(run_dir: Path) -> None:
    from rope_lab.results import load

    row = load(run_dir).trials.collect().row(0, named=True)
    assert row["encoding.family"] == "relative" and row["encoding.rotary"] is True
    assert row["encoding.learned"] is False and row["encoding.additive_bias"] is False
    assert row["encoding.options"] == " rotary_fraction 0.5"
    assert row["task.default_metric"] == "accuracy"

"""Tiny sweep specs written to a temporary folder."""

import copy
from pathlib import Path

import pytest
import yaml

TINY = {
    "name": "tiny",
    "base": {
        "model": {"depth": 1, "head_dim": 16, "width": 32},
        "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
        "train": {
            "length": 16,
            "batch_size": 8,
            "steps": 20,
            "warmup_steps": 2,
            "log_every": 5,
            "checkpoint_every": 10,
        },
        "eval": {
            "length_multipliers": [1, 2],
            "batches": 1,
            "batch_size": 4,
            "position_buckets": 2,
        },
        "ntk": {"enabled": False},
    },
    "grid": {"model.position.kind": ["rope", "alibi"]},
    "scaling": {"methods": ["linear", "dynamic"], "factors": [2]},
    "resources": {"num_cpus": 1},
    "max_retries": 1,
}


def write_spec(folder: Path, **changes) -> Path:
    """A copy of TINY with top-level or dotted `base.` changes (None: the key removed),
    written as YAML."""
    spec = copy.deepcopy(TINY)
    for key, value in changes.items():
        node = spec
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
        if value is None:
            del node[last]
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def tiny_spec(tmp_path):
    """Path of the tiny two-trial spec."""
    return write_spec(tmp_path)

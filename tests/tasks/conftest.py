"""Fixtures of the task tests: a small corpus, one task of each kind and their batches."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import BATCH, LENGTHS, all_tasks, as_numpy


@pytest.fixture(scope="session")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    rng = np.random.default_rng(0)
    path.write_bytes(rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    return str(path)


@pytest.fixture(scope="session")
def tasks(text_file: str) -> dict:
    return {task.name: task for task in all_tasks(text_file)}


@pytest.fixture(scope="session")
def batches(tasks: dict) -> dict:
    """(name, length) -> numpy (tokens, targets, mask) sampled with key(length); one jit
    compilation per task and length, shared by the tests."""
    return {
        (name, length): as_numpy(sample_batch(task, BATCH, length, key=jax.random.key(length)))
        for name, task in tasks.items()
        for length in LENGTHS
    }

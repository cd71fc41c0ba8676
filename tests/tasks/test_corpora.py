"""Tests for rope_lab.tasks.corpora: built-in real-text corpora for ``lm_text``."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rope_lab.tasks import make_task
from rope_lab.tasks.corpora import builtin_text, is_builtin
from rope_lab.tasks.sampling import sample_batch
from tests.tasks.common import as_numpy


def test_python_docs_is_the_pydoc_topics_text() -> None:
    from pydoc_data.topics import topics

    data = builtin_text("builtin:python-docs")
    expected = "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    assert data.tobytes() == expected
    assert data.size > 100_000  # enough text that L_train windows rarely repeat
    assert not data.flags.writeable
    assert is_builtin("builtin:python-docs") and not is_builtin("docs/builtin:x")


def test_unknown_corpus_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown built-in corpus.*allowed: builtin:python-docs"):
        builtin_text("builtin:shakespeare")


def test_lm_text_on_a_builtin_corpus_reads_its_held_out_tail() -> None:
    task = make_task("lm_text", 256, path="builtin:python-docs", eval_fraction=0.1)
    data = builtin_text("builtin:python-docs")
    held_out = round(0.1 * data.size)
    assert task.split_bytes("eval").tobytes() == data[data.size - held_out :].tobytes()
    tokens, targets, _ = as_numpy(sample_batch(task, 4, 32, split="eval", key=jax.random.key(1)))
    tail = data[data.size - held_out :].tobytes()
    for row_tok, row_tgt in zip(tokens, targets, strict=True):
        window = np.append(row_tok, row_tgt[-1]).astype(np.uint8).tobytes()
        assert window in tail

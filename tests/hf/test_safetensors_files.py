"""A truncated or garbage `.safetensors` file is named in one line, never safetensors' error."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save_file

from rope_lab.hf.weights import _read_tensors
from rope_lab.runtime.checked_files import CorruptFile

LLAMA = SimpleNamespace(model_type="llama")  # all `_read_tensors` reads of the architecture


@pytest.mark.parametrize(
    ("damage", "note"),
    [(lambda data: data[: len(data) // 2], "1064 bytes"), (lambda data: b"\x07" * 64, "64 bytes")],
    ids=["truncated", "garbage"],
)
def test_a_damaged_safetensors_file_is_named(tmp_path, damage, note):
    tensors = {"model.norm.weight": np.arange(8, dtype=np.float32).reshape(2, 4)}
    tensors["model.embed_tokens.weight"] = np.ones((16, 30), np.float32)
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    read = _read_tensors(tmp_path, LLAMA)  # type: ignore[arg-type]
    assert np.array_equal(read["model.norm.weight"], tensors["model.norm.weight"])
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptFile) as info:
        _read_tensors(tmp_path, LLAMA)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"{re.escape(str(path))} is not a readable safetensors file \(truncated\? {note}\): "
        r".+; download or export the checkpoint again",
        message,
    ), message

"""A damaged model.eqx or checkpoint step is named in one line; restore falls back a step."""

from __future__ import annotations

import re
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from rope_lab.runtime.checked_files import CorruptFile
from rope_lab.trial.checkpoint import TrialCheckpointer, load_model, save_model


def _mlp(seed: int = 0) -> eqx.nn.MLP:
    return eqx.nn.MLP(4, 2, width_size=8, depth=2, key=jax.random.key(seed))


def _hint(path: Path) -> str:
    return re.escape(str(path))


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda data: data[: len(data) // 2], "is truncated or damaged"),
        (lambda data: b"", "is empty"),
        (lambda data: bytes(range(256)) * 4, "is not a model file"),
    ],
    ids=["truncated", "empty", "random"],
)
def test_a_damaged_model_file_is_named_in_one_line(tmp_path, damage, what):
    path = save_model(tmp_path / "model.eqx", _mlp())
    path.write_bytes(damage(path.read_bytes()))
    size = path.stat().st_size
    note = "" if size == 0 else rf" \({size} bytes\): .+"
    with pytest.raises(CorruptFile) as info:
        load_model(path, _mlp(1))
    message = str(info.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"{_hint(path)} {what}{note}; delete it and rerun the sweep to recompute it",
        message,
    ), message


def test_a_model_file_with_trailing_bytes_or_missing_is_named(tmp_path):
    path = save_model(tmp_path / "model.eqx", _mlp())
    good = load_model(path, _mlp(1))
    assert np.array_equal(good.layers[0].weight, _mlp().layers[0].weight)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"x")
    with pytest.raises(CorruptFile) as info:
        load_model(path, _mlp(1))
    assert str(info.value) == (
        f"{path} holds more than this model's leaves ({size + 1} bytes); delete it and rerun "
        "the sweep to recompute it"
    )
    path.unlink()
    with pytest.raises(CorruptFile, match=rf"^{_hint(path)} cannot be read: .*No such file"):
        load_model(path, _mlp(1))


def _damage_step(folder: Path) -> None:
    for file in (folder / "model").rglob("*"):
        if file.is_file():
            file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def test_a_damaged_checkpoint_step_is_named_and_restore_falls_back(tmp_path):
    model = _mlp()
    opt = optax.adam(1e-2).init(eqx.filter(model, eqx.is_array))
    later = eqx.apply_updates(
        model, jax.tree.map(lambda x: x + 1.0, eqx.filter(model, eqx.is_array))
    )
    with TrialCheckpointer(tmp_path / "ckpt", every=1) as ckpt:
        ckpt.save(1, model, opt)
        ckpt.save(2, later, opt)
    step_dir = (tmp_path / "ckpt" / "2").absolute()
    _damage_step(step_dir)
    with TrialCheckpointer(tmp_path / "ckpt", every=1) as ckpt:
        with pytest.raises(CorruptFile) as info:
            ckpt.restore(_mlp(1), opt, step=2)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"{step_dir} is a damaged checkpoint step")
        assert message.endswith(f"; delete {step_dir} to resume from the step before it")
        with pytest.warns(UserWarning, match=r"; restoring step 1 instead$"):
            restored, _, step, _ = ckpt.restore(_mlp(1), opt)
    assert step == 1
    assert np.array_equal(restored.layers[0].weight, model.layers[0].weight)

"""A trial whose model is a local Hugging Face checkpoint (`model.init.hf`): the checkpoint's
config.json decides the architecture (`model.*`), the vocabulary (`task.vocab_size`) and the
training length (`train.length`: its original context), and nothing is trained
(`train.steps: 0`); the stages are the evaluation as loaded, every scaling (zero-shot, and
fine-tuned with `eval.finetune_steps`), the decode protocols and the NTK probes, as for a
model rope_lab trained. A field the trial sets that disagrees with the checkpoint is refused
naming both values; a checkpoint whose tensor shapes (safetensors headers) disagree with its
config.json is refused naming the key and the tensor (`rope_lab.hf.shapes`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rope_lab.hf.config import local_folder, read_config
from rope_lab.hf.shapes import check_checkpoint
from rope_lab.model.config import ModelConfig
from rope_lab.roles import Export, roles
from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

# model fields the checkpoint decides (their declared export, `rope_lab.roles.Export`)
ARCHITECTURE = tuple(
    f.name
    for f, role in roles(ModelConfig)
    if isinstance(role.export, Export) and role.export.decided_by_checkpoint
)


def from_checkpoint(cfg: TrialConfig) -> TrialConfig:
    """`cfg` with the architecture, vocabulary and training length of its checkpoint and no
    training steps; ConfigError naming the folder when it is not a checkpoint, or naming a
    field set otherwise than the checkpoint says."""
    from rope_lab.config import TaskConfig, TrainConfig

    path = cfg.model.init.hf
    assert path is not None
    arch = read_config(path)
    check_checkpoint(arch, local_folder(path))
    given = cfg.model
    for name in ARCHITECTURE:
        _agrees(f"model.{name}", getattr(given, name), getattr(ModelConfig(), name),
                getattr(arch.model, name), path)  # fmt: skip
    tr, task = cfg.train, cfg.task
    _agrees("train.length", tr.length, TrainConfig().length, arch.train_length, path)
    _agrees("task.vocab_size", task.vocab_size, TaskConfig().vocab_size, arch.vocab_size, path)
    if tr.steps not in (0, TrainConfig().steps):
        raise ConfigError(
            f"train.steps: a trial from a checkpoint ({path}) trains nothing; got {tr.steps} "
            "(fine-tune with eval.finetune_steps)"
        )
    model = dataclasses.replace(
        arch.model, init=given.init, attention=given.attention, dtype=given.dtype
    )
    return dataclasses.replace(
        cfg,
        model=model,
        train=dataclasses.replace(tr, length=arch.train_length, steps=0),
        task=dataclasses.replace(task, vocab_size=arch.vocab_size),
    )


def _agrees(key: str, value: Any, default: Any, checkpoint: Any, path: str) -> None:
    """ConfigError unless `value` is the field's default or what the checkpoint says."""
    if value != default and value != checkpoint:
        raise ConfigError(
            f"{key}: the checkpoint {path} sets {checkpoint!r}; got {value!r} (leave it unset)"
        )

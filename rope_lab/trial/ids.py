"""Trial ids: a readable slug plus the hash of what trains the model (`training_hash`).

The eval block is not in the id: evaluation stages are keyed by their own fields
(`rope_lab.trial.stage_plan`). Execution fields and fields at their neutral defaults are left
out, so a finished trial is found again when rerun on other hardware or after a new option.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from rope_lab.typed import thaw, to_dict

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig


def trial_id(cfg: TrialConfig) -> str:
    """Readable slug plus `training_hash`: the id of the trained model, which evaluation
    stages hang off. The slug names the position encoding and layout, or a family that has
    its own slug (`FamilyConfig.slug`: 'cnn-k3-d1.2')."""
    m = cfg.model
    layout = "".join(f"+{layer.slug(m)}" for layer in m.layers)
    layout += "-ssmax" if m.scalable_softmax else ""
    pose = cfg.train.pose_target_length
    layout += f"-pose{pose}" if pose is not None else ""
    network = m.arch.slug() or f"{m.position.kind}{m.position.options.slug()}{layout}"
    network += "-lazy" if cfg.train.regime == "lazy" else ""  # the linearised twin
    slug = f"{cfg.task.name}-{network}-w{m.width}-d{m.depth}-L{cfg.train.length}-s{cfg.train.seed}"
    return f"{slug}-{training_hash(cfg)}"


# How a trial runs, not what it computes: left out of trial ids, so a finished trial is found
# again when rerun on another device count, attention kernel, NTK chunking or eval/NTK padding.
EXECUTION_FIELDS = (
    "model.attention",
    "train.devices",
    "train.shard_params",
    "eval.pad_to_longest",
    "eval.memory_budget_mb",
    "ntk.chunk_size",
    "ntk.pad_to_longest",
)


# Fields added after trials were first run, with the value that means "as before": at that
# value they are left out of the hash, so adding an off-by-default method keeps every existing
# trial id (and its finished results) valid.
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "model.layers": [],
    "model.scalable_softmax": False,
    "model.family": "transformer",
    "model.kv_heads": None,
    "model.qkv_bias": False,
    "model.qk_norm": False,
    "model.tie_embeddings": False,
    "model.norm_eps": 1e-5,
    "model.init": {"hf": None},
    "train.pose_target_length": None,
    "train.pose_chunks": 2,
    "train.regime": "rich",
    "eval.zero_shot_temperature": False,
    "eval.finetune_methods": [],
    "eval.finetune_factors": [],
    "eval.text_protocol": "random",
    "eval.text_stride": None,
    "ntk.nngp_samples": 0,
}


def config_hash(cfg: Any, n: int = 10) -> str:
    """Stable hex digest of a config's canonical JSON (`name`, EXECUTION_FIELDS and fields at
    their NEUTRAL_DEFAULTS excluded)."""
    return _digest(to_dict(cfg), n)


def _digest(data: dict[str, Any], n: int) -> str:
    """`config_hash` of a config already as a dict (sections as sub-dicts)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items() if k != "name"}
    for dotted in EXECUTION_FIELDS:
        section, _, key = dotted.partition(".")
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    for dotted, neutral in NEUTRAL_DEFAULTS.items():
        section, _, key = dotted.partition(".")
        if isinstance(data.get(section), dict) and data[section].get(key, neutral) == neutral:
            data[section].pop(key, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


# The sections that decide the trained model (and its NTK trajectory); `eval` is not one: the
# evaluation and extension stages are keyed by their own fields (`rope_lab.trial.stage_plan`).
TRAINING_SECTIONS = ("model", "task", "train", "ntk")


def training_hash(cfg: TrialConfig, n: int = 10) -> str:
    """`config_hash` of what trains a trial's model: the TRAINING_SECTIONS, plus the position
    table's length (`max_length`, which the eval lengths can set) when an encoding of the model
    is `sized_by_length` (a learned table), and the task's `data_identity` when it has one (a
    prepared corpus' fingerprint). Specs differing only in evaluation, scalings or fine-tunes
    share the trained model."""
    full = to_dict(cfg)
    data: dict[str, Any] = {section: full[section] for section in TRAINING_SECTIONS}
    from rope_lab.registry import TASKS  # a task's data identity (a corpus' fingerprint)

    identity = TASKS[cfg.task.name].from_kwargs(**thaw(cfg.task.params)).data_identity()
    if identity is not None:
        data["data"] = identity
    m = cfg.model
    if any(m.layer_position(layer).options.sized_by_length for layer in m.pattern):
        data["table_length"] = cfg.max_length
    return _digest(data, n)

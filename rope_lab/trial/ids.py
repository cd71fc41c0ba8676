"""Trial ids: a readable slug plus the hash of what trains the model (`training_hash`).

The eval block is not in the id: evaluation stages are keyed by their own fields
(`rope_lab.trial.stage_plan`). What enters the hash is each field's declared role
(`rope_lab.roles`): execution fields never, identity fields unless at their neutral value, so a
finished trial is found again when rerun on other hardware or after a new option.
"""

from __future__ import annotations

import hashlib
import json
import typing
from typing import TYPE_CHECKING, Any

from rope_lab.roles import roles
from rope_lab.typed import nested_dataclass, thaw, to_dict

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig


def trial_id(cfg: TrialConfig) -> str:
    """Readable slug plus `training_hash`: the id of the trained model, which evaluation
    stages hang off. The slug names the position encoding and layout, or a family that has
    its own slug (`FamilyConfig.slug`: 'cnn-k3-d1.2')."""
    m = cfg.model
    layout = "".join(f"+{layer.slug(m)}" for layer in m.layers)
    layout += "-ssmax" if m.scalable_softmax else ""
    layout += m.attention_options.slug()  # what attention computes, if not plain softmax
    pose = cfg.train.pose_target_length
    layout += f"-pose{pose}" if pose is not None else ""
    network = m.arch.slug() or f"{m.position.kind}{m.position.options.slug()}{layout}"
    network += "-lazy" if cfg.train.regime == "lazy" else ""  # the linearised twin
    slug = f"{cfg.task.name}-{network}-w{m.width}-d{m.depth}-L{cfg.train.length}-s{cfg.train.seed}"
    return f"{slug}-{training_hash(cfg)}"


def config_hash(cfg: Any, n: int = 10) -> str:
    """Stable hex digest of a config's canonical JSON: its identity fields (`rope_lab.roles`)
    at every depth, those at their neutral value left out, `name` and execution fields never
    in it."""
    return _digest(to_dict(cfg, identity_only=True), n)


def _digest(data: dict[str, Any], n: int) -> str:
    """Digest of a config's identity already as a dict (`typed.to_dict(identity_only=True)`)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def execution_fields(cls: type, prefix: str = "") -> tuple[str, ...]:
    """Dotted names of the execution fields of a config class and its nested sections (the
    fields never in an id), e.g. `("model.attention", "train.devices", ...)` of a
    TrialConfig."""
    out: list[str] = []
    hints = typing.get_type_hints(cls)
    for f, role in roles(cls):
        if not role.identity:
            out.append(f"{prefix}{f.name}")
        elif (nested := nested_dataclass(hints[f.name])) is not None:
            out.extend(execution_fields(nested, f"{prefix}{f.name}."))
    return tuple(out)


# The sections that decide the trained model (and its NTK trajectory); `eval` is not one: the
# evaluation and extension stages are keyed by their own fields (`rope_lab.trial.stage_plan`).
TRAINING_SECTIONS = ("model", "task", "train", "ntk")
# The eval fields that draw the in-range batches a `train.match` search measures its loss on
# (`rope_lab.trial.match`): part of a matched trial's hash.
MATCH_EVAL_KEYS = ("batches", "batch_size", "seed", "text_protocol", "text_stride")


def training_hash(cfg: TrialConfig, n: int = 10) -> str:
    """`config_hash` of what trains a trial's model: the TRAINING_SECTIONS, plus the position
    table's length (`max_length`, which the eval lengths can set) when an encoding of the model
    is `sized_by_length` (a learned table), the MATCH_EVAL_KEYS of `eval` when `train.match`
    searches (it stops on losses measured on those batches), and the task's `data_identity`
    when it has one (a prepared corpus' fingerprint). Specs differing only in evaluation,
    scalings or fine-tunes share the trained model (a matched trial's batches aside)."""
    full = to_dict(cfg, identity_only=True)
    data: dict[str, Any] = {section: full[section] for section in TRAINING_SECTIONS}
    from rope_lab.registry import TASKS  # a task's data identity (a corpus' fingerprint)

    identity = TASKS[cfg.task.name].from_kwargs(**thaw(cfg.task.params)).data_identity()
    if identity is not None:
        data["data"] = identity
    if cfg.train.match.target is not None:  # the search measures loss on the eval batches
        data["match_batches"] = {k: full["eval"].get(k) for k in MATCH_EVAL_KEYS}
    m = cfg.model
    if any(m.layer_position(layer).options.sized_by_length for layer in m.pattern):
        data["table_length"] = cfg.max_length
    return _digest(data, n)

"""A trial's stages and their names: the one place that keys them. Plain data (no JAX).

A trial's id hashes only what trains its model (`trial.ids.training_hash`). Everything after
training is a stage hanging off the trained model, named after what it computes plus a hash of
what decides its rows:

    train                  train, save the model, track the NTK (keyed by the trial id itself)
    eval-<hash>            the model as trained, at every eval length
    <method>_x<f>-<hash>   one scaling of `scaling_plan.scalings_for`: its zero-shot rows, its
                           fine-tuned rows when `scaling_plan.fine_tuned`, and for a RoPE method
                           under NTK tracking the K_cross metrics under it
    decode-<hash>          with `eval.decode.protocols`: answers generated with a key/value
                           cache under every zero-shot scaling and protocol (`decode_eval`)

The hash covers how sequences are read (`READING_FIELDS`: every `EvalConfig` field but those
of `NOT_READING`), the scaling's parameters and, when it fine-tunes, the fine-tune's steps and
learning rate; the decode stage's also covers every `DecodeConfig` field. So a spec that adds
scalings or fine-tunes to a finished sweep runs only the new stages, and one that reads
differently (other lengths, batches or text protocol) reruns the evaluation stages, never the
training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from rope_lab.config import DecodeConfig, EvalConfig, TrialConfig, to_dict
from rope_lab.trial.scaling_plan import Scaling, fine_tuned, same_frequencies, scalings_for

TRAIN = "train"  # the train stage's name
EVAL_PREFIX = "eval"  # the as-trained evaluation stage's name before its hash
DECODE = "decode"  # the decode stage's name before its hash

# The EvalConfig fields left out of the reading key, and why. Every other field is read into
# every evaluation stage's key, so a field added to EvalConfig reruns the evaluation until it
# is listed here.
NOT_READING: Final[Mapping[str, str]] = {
    "pad_to_longest": "execution (its role, `rope_lab.roles`): the same rows, padded",
    "memory_budget_mb": "execution (its role, `rope_lab.roles`): the same rows, in sub-batches",
    "accuracy_threshold": "the summary's threshold, applied to the rows once written",
    "methods": "which scaling stages exist; each stage's key holds its method",
    "factors": "which scaling stages exist; each stage's key holds its factor",
    "method_params": "a scaling's parameters, in its own stage's key",
    "zero_shot_temperature": "whether the temperature stage exists",
    "finetune_steps": "in the key of each stage it fine-tunes",
    "finetune_lr": "in the key of each stage it fine-tunes",
    "finetune_methods": "which stages fine-tune (`scaling_plan.fine_tuned`), in their keys",
    "finetune_factors": "which stages fine-tune (`scaling_plan.fine_tuned`), in their keys",
    "decode": "the decode stage's own key (`DECODE_FIELDS`)",
}
# Eval fields that decide which sequences are read and how rows are cut.
READING_FIELDS: Final = tuple(
    f.name for f in dataclasses.fields(EvalConfig) if f.name not in NOT_READING
)
# The DecodeConfig fields in the decode stage's key: all of them (none is execution only).
DECODE_FIELDS: Final = tuple(f.name for f in dataclasses.fields(DecodeConfig))


@dataclass(frozen=True)
class Stage:
    """One stage of a trial: its `name` (folder and segment name), its `kind` (TRAIN, EVAL_PREFIX
    for the stages reading the model teacher-forced, DECODE) and the scaling an evaluation
    stage reads the model under (the as-trained entry of `scalings_for` for the first)."""

    name: str
    scaling: Scaling | None = None
    kind: str = EVAL_PREFIX

    @property
    def is_train(self) -> bool:
        """Whether this is the train stage."""
        return self.kind == TRAIN


# Reading fields added after stages were first keyed, with the value they had before: left
# out of the key at that value, so existing stages keep their names.
UNKEYED_DEFAULTS: Final[Mapping[str, object]] = {"depths": [], "attention_stats": False}


def reading(cfg: TrialConfig) -> dict:
    """The `READING_FIELDS` of the eval config, as plain data (a field of `UNKEYED_DEFAULTS`
    only off that value)."""
    ev = to_dict(cfg.eval)
    return {
        name: ev[name]
        for name in READING_FIELDS
        if name not in UNKEYED_DEFAULTS or ev[name] != UNKEYED_DEFAULTS[name]
    }


def _hash(data: dict, n: int = 8) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def stage_key(cfg: TrialConfig, scaling: Scaling, *, as_trained: bool = False) -> str:
    """Hash of what decides a stage's rows: the reading fields, the scaling (method, factor,
    parameters; nothing for the as-trained stage, whose scaling the trial id already fixes) and
    the fine-tune's steps and learning rate when the stage fine-tunes."""
    data: dict = {"reading": reading(cfg)}
    if not as_trained:
        data["scaling"] = [scaling.method, scaling.factor, scaling.params]
        if fine_tuned(cfg, scaling):
            data["finetune"] = [cfg.eval.finetune_steps, cfg.eval.finetune_lr]
    return _hash(data)


def scaling_stage_name(cfg: TrialConfig, scaling: Scaling) -> str:
    """Folder-safe name of a scaling stage, e.g. 'yarn_x4-1f0c9a2b'."""
    return f"{scaling.method}_x{scaling.factor:g}-{stage_key(cfg, scaling)}"


def decoded_scalings(cfg: TrialConfig) -> list[Scaling]:
    """The scalings the decode stage generates under: every zero-shot entry of `scalings_for`
    (a `default` stage that exists only to fine-tune repeats the model as trained)."""
    trained, *scalings = scalings_for(cfg)
    return [trained, *(s for s in scalings if not same_frequencies(trained, s))]


def eval_stages(cfg: TrialConfig) -> list[Stage]:
    """The stages that read the trained model: as trained first, then one per scaling, then
    the decode stage when `eval.decode.protocols` are given."""
    trained, *scalings = scalings_for(cfg)
    first = Stage(f"{EVAL_PREFIX}-{stage_key(cfg, trained, as_trained=True)}", trained)
    out = [first, *(Stage(scaling_stage_name(cfg, s), s) for s in scalings)]
    protocols = cfg.eval.decode.protocols
    if protocols:
        decode = to_dict(cfg.eval.decode)
        data = {
            "reading": reading(cfg),
            **{name: decode[name] for name in DECODE_FIELDS},
            "scalings": [[s.method, s.factor, s.params] for s in decoded_scalings(cfg)],
        }
        out.append(Stage(f"{DECODE}-{_hash(data)}", trained, kind=DECODE))
    return out


def trial_stages(cfg: TrialConfig) -> list[Stage]:
    """Every stage of a trial, in the order they run: train, then `eval_stages`."""
    return [Stage(TRAIN, kind=TRAIN), *eval_stages(cfg)]


def find_stage(cfg: TrialConfig, name: str) -> Stage:
    """The stage of `cfg` called `name`; KeyError listing the trial's stages otherwise."""
    for stage in trial_stages(cfg):
        if stage.name == name:
            return stage
    names = [s.name for s in trial_stages(cfg)]
    raise KeyError(f"trial {cfg.trial_id} has no stage {name!r}; its stages are {names}")


__all__ = [
    "DECODE",
    "DECODE_FIELDS",
    "EVAL_PREFIX",
    "NOT_READING",
    "READING_FIELDS",
    "TRAIN",
    "Stage",
    "decoded_scalings",
    "eval_stages",
    "find_stage",
    "reading",
    "scaling_stage_name",
    "stage_key",
    "trial_stages",
]

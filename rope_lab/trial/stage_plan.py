"""A trial's stages and their names: the one place that keys them. Plain data (no JAX).

A trial's id hashes only what trains its model (`config.training_hash`). Everything after
training is a stage hanging off the trained model, named after what it computes plus a hash of
what decides its rows:

    train                  train, save the model, track the NTK (keyed by the trial id itself)
    eval-<hash>            the model as trained, at every eval length
    <method>_x<f>-<hash>   one scaling of `scaling_plan.scalings_for`: its zero-shot rows, its
                           fine-tuned rows when `scaling_plan.fine_tuned`, and for a RoPE method
                           under NTK tracking the K_cross metrics under it
    decode-<hash>          with `eval.decode.protocols`: answers generated with a key/value
                           cache under every zero-shot scaling and protocol (`decode_eval`)

The hash covers how sequences are read (`READING_FIELDS`), the scaling's parameters and, when
it fine-tunes, the fine-tune's steps and learning rate. So a spec that adds scalings or
fine-tunes to a finished sweep runs only the new stages, and one that reads differently
(other lengths, batches or text protocol) reruns the evaluation stages, never the training.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from rope_lab.config import TrialConfig, to_dict
from rope_lab.trial.scaling_plan import Scaling, fine_tuned, same_frequencies, scalings_for

TRAIN = "train"  # the train stage's name
EVAL_PREFIX = "eval"  # the as-trained evaluation stage's name before its hash
DECODE = "decode"  # the decode stage's name before its hash

# Eval fields that decide which sequences are read and how rows are cut. Others are execution
# (`config.EXECUTION_FIELDS`), the summary's threshold, or which stages exist.
READING_FIELDS = (
    "length_multipliers",
    "batches",
    "batch_size",
    "position_buckets",
    "text_protocol",
    "text_stride",
    "seed",
)


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


def reading(cfg: TrialConfig) -> dict:
    """The `READING_FIELDS` of the eval config, as plain data."""
    ev = to_dict(cfg.eval)
    return {name: ev[name] for name in READING_FIELDS}


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
        data = {
            "reading": reading(cfg),
            "protocols": list(protocols),
            "max_new_tokens": cfg.eval.decode.max_new_tokens,
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
    "EVAL_PREFIX",
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

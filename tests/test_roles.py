"""Field roles (`rope_lab.roles`): every config field declares one, and trial ids, curve
labels, Hugging Face export and family checks follow the declarations, not lists."""

from __future__ import annotations

import dataclasses
import typing

import polars as pl
import pytest

from rope_lab.analysis.curve_labels import RULES, label_expr, labelled_fields
from rope_lab.config import ModelConfig, TrialConfig, replace, to_dict, validate
from rope_lab.hf.config import CheckpointError, hf_config
from rope_lab.hf.trial import ARCHITECTURE
from rope_lab.registry import MODELS, POSITIONS, SCALINGS, TASKS
from rope_lab.results.columns import flatten_config
from rope_lab.roles import NOTHING, Export, Label, execution, identity, role_of, roles, undeclared
from rope_lab.trial.ids import execution_fields
from rope_lab.typed import nested_dataclass
from tests.helpers import tiny_trial


def _sections(cls: type = TrialConfig) -> list[type]:
    """`cls` and every config dataclass nested in it (tuples of sections included)."""
    out = [cls]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) is tuple:
            hint = typing.get_args(hint)[0]
        nested = nested_dataclass(hint)
        if nested is not None and nested not in out:
            out += [c for c in _sections(nested) if c not in out]
    return out


CONFIGS = _sections() + [
    cls for registry in (POSITIONS, SCALINGS, TASKS, MODELS) for _, cls in registry.items()
]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_declares_its_role(cls):
    assert undeclared(cls, model_section=cls is ModelConfig) == [], cls.__name__


def test_a_missing_declaration_is_named():
    @dataclasses.dataclass(frozen=True)
    class WithSinks:
        width: int = identity(8)
        sinks: bool = False
        kernel: str = execution("auto")
        gate: bool = identity(False, neutral=False)

    assert undeclared(WithSinks) == ["sinks: no role", "gate: a neutral value but no label"]
    assert undeclared(WithSinks, model_section=True)[:2] == ["width: no export", "width: no needs"]
    with pytest.raises(TypeError, match="'sinks' declares no role"):
        to_dict(WithSinks(), identity_only=True)
    assert to_dict(WithSinks()) == {"width": 8, "sinks": False, "kernel": "auto", "gate": False}


@dataclasses.dataclass(frozen=True)
class Inner:
    a: int = identity(1)
    b: bool = identity(False, neutral=False, label=Label(" +b"))
    c: int = execution(3)


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner = identity(factory=Inner)
    rows: tuple[Inner, ...] = identity((), neutral=(), label=Label(" rows"))


def test_identity_data_drops_execution_and_neutral_fields_at_any_depth():
    assert to_dict(Outer(), identity_only=True) == {"inner": {"a": 1}}
    changed = Outer(Inner(b=True, c=9), (Inner(c=7),))
    assert to_dict(changed, identity_only=True) == {
        "inner": {"a": 1, "b": True},
        "rows": [{"a": 1}],
    }


def test_label_rules_are_curve_label_rules():
    for cls in CONFIGS:
        for f, role in roles(cls):
            if isinstance(role.label, str):
                assert role.label in RULES, f"{cls.__name__}.{f.name}: {role.label!r}"


# A value off the neutral one for each field whose role has a neutral value and a `Label`,
# valid on the tiny RoPE trial (with the other changes given).
OFF_NEUTRAL: dict[str, dict[str, object]] = {
    "model.scalable_softmax": {"model.scalable_softmax": True},
    "model.kv_heads": {"model.kv_heads": 2},
    "model.qkv_bias": {"model.qkv_bias": True},
    "model.qk_norm": {"model.qk_norm": True, "model.norm": "rmsnorm"},
    "model.norm_placement": {"model.norm_placement": "post"},
    "model.qk_norm_scope": {
        "model.qk_norm": True,
        "model.norm": "rmsnorm",
        "model.qk_norm_scope": "projection",
    },
    "model.tie_embeddings": {"model.tie_embeddings": True},
    "model.scale_embedding": {"model.scale_embedding": True},
    "model.norm_zero_centred": {"model.norm": "rmsnorm", "model.norm_zero_centred": True},
    "model.attention_scale_dim": {"model.attention_scale_dim": 12.0},
    "model.logit_softcap": {"model.logit_softcap": 30.0},
    "model.block": {"model.block": "parallel"},
    "model.logit_scale": {"model.logit_scale": 0.5},
    "model.norm_eps": {"model.norm_eps": 1e-6},
    "model.position.randomized": {
        "model.position.randomized": True,
        "model.position.random_max_length": 64,
    },
    "train.pose_target_length": {"train.pose_target_length": 64},
    "train.pose_chunks": {"train.pose_target_length": 64, "train.pose_chunks": 3},
    "train.regime": {"train.regime": "lazy"},
    "model.attention_fn": {"model.attention_fn": "sinks"},
}


def _base() -> TrialConfig:
    return validate(tiny_trial("rope", width=32, head_dim=8, depth=2))


def _label(cfg: TrialConfig) -> str:
    frame = pl.DataFrame([{**flatten_config(cfg), "method": "none", "factor": 1.0}])
    return frame.select(label_expr(frame.columns))["label"].item()


def test_every_labelled_field_has_an_example_off_its_neutral_value():
    declared = {x.column for x in labelled_fields() if isinstance(x.label, Label)}
    assert declared == set(OFF_NEUTRAL)


@pytest.mark.parametrize("column", sorted(OFF_NEUTRAL))
def test_a_labelled_field_off_neutral_moves_the_id_and_names_the_curve(column):
    """Off its neutral value a field changes the trial id and the curve label (so curves and
    claim arms are never pooled); set to its neutral value explicitly it changes neither."""
    base = _base()
    (item,) = (x for x in labelled_fields() if x.column == column)
    other = validate(replace(base, **OFF_NEUTRAL[column]))
    if column == "train.pose_chunks":  # its label follows PoSE's own
        base = validate(replace(base, **{"train.pose_target_length": 64}))
    assert other.trial_id != base.trial_id
    assert _label(other) != _label(base) and _label(other).startswith(_label(base))
    at_neutral = validate(replace(base, **{column: item.off}))
    assert at_neutral.trial_id == base.trial_id and _label(at_neutral) == _label(base)


def test_execution_fields_are_declared_and_never_move_the_id():
    assert execution_fields(TrialConfig) == (
        "name",
        "model.attention",
        "train.devices",
        "train.processes",
        "train.shard_params",
        "train.remat",
        "eval.pad_to_longest",
        "eval.memory_budget_mb",
        "ntk.chunk_size",
        "ntk.pad_to_longest",
    )


# A value each `only`-exported model field (and the MLP) takes outside the Llama family.
NOT_LLAMA = {
    "norm": "layernorm",
    "mlp": "gelu",
    "parametrization": "mup",
    "scalable_softmax": True,
    "family": "cnn",
    "attention_fn": "sinks",
}


def test_export_refuses_each_single_valued_field_naming_it():
    llama = replace(ModelConfig(head_dim=8, width=32), norm="rmsnorm", mlp="swiglu")
    hf_config(llama, vocab_size=40, train_length=16)  # exportable as it is
    only = {
        f.name
        for f, role in roles(ModelConfig)
        if isinstance(role.export, Export) and role.export.only is not NOTHING
    }
    # written: swiglu, or geglu in a Gemma 3 block; rmsnorm, or layernorm_no_bias in Cohere 2's
    assert only == set(NOT_LLAMA) - {"mlp", "norm"}
    for name, value in NOT_LLAMA.items():
        with pytest.raises(CheckpointError, match=rf"^model\.{name}: {value!r} has no Hugging"):
            hf_config(replace(llama, **{name: value}), vocab_size=40, train_length=16)


def test_a_checkpoint_decides_the_written_and_single_valued_fields():
    decided = {
        f.name
        for f, role in roles(ModelConfig)
        if isinstance(role.export, Export) and role.export.decided_by_checkpoint
    }
    assert set(ARCHITECTURE) == decided
    assert {"attention", "dtype", "init", "base_width", "arch"}.isdisjoint(decided)


def test_a_family_lacking_a_capability_has_no_use_for_the_fields_needing_it():
    needs = {f.name: role.needs for f, role in roles(ModelConfig)}
    cnn, transformer = MODELS["cnn"](), MODELS["transformer"]()
    assert transformer.unused_fields == ()
    assert set(cnn.unused_fields) == {n for n, need in needs.items() if isinstance(need, str)}
    assert {"width", "depth", "norm", "mlp", "parametrization"}.isdisjoint(cnn.unused_fields)


def test_role_of_names_the_field():
    (width,) = (f for f in dataclasses.fields(ModelConfig) if f.name == "width")
    assert role_of(width).identity and role_of(width).export == Export(written=True)

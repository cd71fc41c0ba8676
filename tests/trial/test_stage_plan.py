"""Stage keys: the trial id names the trained model; each stage's name changes exactly when
what decides its rows changes."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import (
    ConfigError,
    DecodeConfig,
    EvalConfig,
    TrialConfig,
    replace,
    validate,
)
from rope_lab.trial.ids import execution_fields
from rope_lab.trial.scaling_plan import Scaling
from rope_lab.trial.stage_plan import (
    DECODE_FIELDS,
    NOT_READING,
    READING_FIELDS,
    TRAIN,
    eval_stages,
    find_stage,
    scaling_stage_name,
    trial_stages,
)
from tests.helpers import tiny_trial

EXECUTION_FIELDS = execution_fields(TrialConfig)


def _names(cfg) -> dict[tuple[str, float], str]:
    return {(s.scaling.method, s.scaling.factor): s.name for s in eval_stages(cfg)}


EVAL_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "eval.length_multipliers": st.lists(
            st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=3, unique=True
        ).map(tuple),
        "eval.batches": st.integers(1, 4),
        "eval.methods": st.lists(
            st.sampled_from(["linear", "ntk", "dynamic", "yarn"]), max_size=3, unique=True
        ).map(tuple),
        "eval.factors": st.lists(st.sampled_from([2.0, 4.0]), min_size=1, unique=True).map(tuple),
        "eval.finetune_steps": st.integers(0, 3),
        "eval.zero_shot_temperature": st.booleans(),
        "eval.text_protocol": st.sampled_from(["random"]),
        "eval.seed": st.integers(0, 5),
    },
)


@settings(max_examples=25, deadline=None)
@given(changes=EVAL_CHANGES)
def test_the_trial_id_ignores_everything_evaluation_decides(changes):
    """Any change of the eval block keeps the trained model's id (RoPE: no table)."""
    base = tiny_trial()
    assert validate(replace(base, **changes)).trial_id == base.trial_id


def test_a_learned_table_sized_by_the_eval_lengths_is_part_of_the_id():
    """A learned table's rows depend on the longest evaluated length (its parameters' shape),
    so a longer evaluation is a different model; an explicit table length is not."""
    learned = tiny_trial("learned")
    longer = replace(learned, **{"eval.length_multipliers": (1.0, 2.0, 4.0)})
    assert longer.max_length != learned.max_length and longer.trial_id != learned.trial_id
    sized = replace(learned, **{"model.position.max_length": 128})
    assert (
        replace(sized, **{"eval.length_multipliers": (1.0, 4.0)}).trial_id
        == replace(sized, **{"eval.length_multipliers": (1.0, 2.0)}).trial_id
    )
    assert replace(learned, **{"eval.batches": 7}).trial_id == learned.trial_id


def test_adding_a_scaling_keeps_every_existing_stage_name():
    cfg = validate(replace(tiny_trial(), **{"eval.methods": ("linear",), "eval.factors": (2.0,)}))
    more = validate(
        replace(cfg, **{"eval.methods": ("linear", "yarn"), "eval.factors": (2.0, 4.0)})
    )
    before, after = _names(cfg), _names(more)
    assert before.items() <= after.items()
    assert set(after) - set(before) == {("linear", 4.0), ("yarn", 2.0), ("yarn", 4.0)}


def test_fine_tuning_renames_only_the_stages_it_fine_tunes():
    cfg = validate(
        replace(tiny_trial(), **{"eval.methods": ("linear", "yarn"), "eval.factors": (2.0,)})
    )
    tuned = validate(
        replace(cfg, **{"eval.finetune_steps": 3, "eval.finetune_methods": ("linear",)})
    )
    before, after = _names(cfg), _names(tuned)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {("linear", 2.0)}
    assert (
        _names(replace(tuned, **{"eval.finetune_lr": 0.5}))[("linear", 2.0)]
        != after[("linear", 2.0)]
    )
    # an execution setting or the summary's threshold renames nothing
    same = replace(tuned, **{"eval.memory_budget_mb": 1.0, "eval.accuracy_threshold": 0.5})
    assert _names(same) == after


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("length_multipliers", (1.0, 3.0)),
        ("batches", 3),
        ("batch_size", 5),
        ("position_buckets", 3),
        ("seed", 9),
        ("text_stride", 4),
    ],
)
def test_each_reading_field_renames_every_evaluation_stage_and_not_training(field, value):
    assert field in READING_FIELDS
    cfg = validate(tiny_trial())
    other = replace(cfg, **{f"eval.{field}": value})
    stages, moved = trial_stages(cfg), trial_stages(other)
    assert stages[0].name == moved[0].name == TRAIN
    assert all(a.name != b.name for a, b in zip(stages[1:], moved[1:], strict=True))
    assert len(stages) == len(moved)


def test_stage_names_read_as_what_they_compute():
    cfg = validate(replace(tiny_trial(), **{"eval.methods": ("yarn",), "eval.factors": (4.0,)}))
    train, as_trained, yarn = trial_stages(cfg)
    assert train.is_train and not as_trained.is_train
    assert as_trained.name.startswith("eval-") and as_trained.scaling.method == "default"
    assert yarn.name.startswith("yarn_x4-") and len(yarn.name) == len("yarn_x4-") + 8
    assert yarn.name == scaling_stage_name(cfg, Scaling("yarn", 4.0))
    assert find_stage(cfg, yarn.name) == yarn
    with pytest.raises(KeyError, match="its stages are"):
        find_stage(cfg, "yarn_x4")


# Another valid value of every EvalConfig and DecodeConfig field (the bases below differ from
# each); a field added to either class needs one here.
OTHER_EVAL = {
    "length_multipliers": (1.0, 3.0),
    "batches": 3,
    "batch_size": 5,
    "position_buckets": 3,
    "methods": ("yarn",),
    "factors": (4.0,),
    "method_params": (("llama3", (("high_freq_factor", 8.0), ("low_freq_factor", 1.0))),),
    "finetune_steps": 5,
    "finetune_lr": 0.5,
    "finetune_methods": ("linear",),
    "finetune_factors": (2.0,),
    "accuracy_threshold": 0.5,
    "pad_to_longest": True,
    "memory_budget_mb": 1.0,
    "zero_shot_temperature": False,
    "depths": (0.5,),
    "attention_stats": True,
    "text_protocol": "nonoverlapping",
    "text_stride": 4,
    "decode": DecodeConfig(protocols=("per_step_full",)),
    "seed": 9,
}
OTHER_DECODE = {"protocols": ("prefill_fixed", "per_step_full"), "max_new_tokens": 1}


@pytest.fixture
def bases(tmp_path) -> list:
    """Valid trials with every kind of stage between them: a passkey trial that fine-tunes,
    decodes and has the temperature stage, and a text trial read by sliding windows."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    decoding = {
        "eval.decode.protocols": ("prefill_fixed",),
        "eval.finetune_steps": 2,
        "eval.zero_shot_temperature": True,
    }
    text = tiny_trial(task="lm_text", vocab=256, task_params=(("path", str(path)),))
    return [
        validate(replace(tiny_trial(), **decoding)),
        validate(replace(text, **{"eval.text_protocol": "sliding"})),
    ]


def _changed(base, key: str, value):
    """``base`` with ``key`` set to ``value``, validated; None where that is no valid trial."""
    try:
        return validate(replace(base, **{key: value}))
    except ConfigError:
        return None


def test_every_eval_field_not_excluded_renames_every_evaluation_stage(bases):
    """The reading key is every EvalConfig field but NOT_READING: changing any of them renames
    every evaluation stage (the decode stage too) and keeps the trained model."""
    read = tuple(f.name for f in dataclasses.fields(EvalConfig) if f.name not in NOT_READING)
    assert read == READING_FIELDS
    for name in read:
        checked = 0
        for base in bases:
            other = _changed(base, f"eval.{name}", OTHER_EVAL[name])
            if other is None:  # e.g. a text protocol on a synthetic task
                continue
            before, after = trial_stages(base), trial_stages(other)
            assert other.trial_id == base.trial_id and after[0].name == before[0].name == TRAIN
            assert len(after) == len(before)
            assert all(a.name != b.name for a, b in zip(before[1:], after[1:], strict=True)), name
            checked += 1
        assert checked, f"eval.{name}: no valid trial to change it in"


def test_excluded_eval_fields_keep_the_as_trained_stage_and_execution_renames_nothing(bases):
    """Every NOT_READING field is an EvalConfig field and keeps the as-trained stage's name;
    the execution fields and the summary's threshold keep every name."""
    fields = {f.name for f in dataclasses.fields(EvalConfig)}
    assert set(NOT_READING) <= fields and set(OTHER_EVAL) == fields
    # reviewed: what each changes is which stages exist, a scaling stage's or the decode
    # stage's own key, or nothing in the rows
    assert set(NOT_READING) == {
        "pad_to_longest",
        "memory_budget_mb",
        "accuracy_threshold",
        "methods",
        "factors",
        "method_params",
        "zero_shot_temperature",
        "finetune_steps",
        "finetune_lr",
        "finetune_methods",
        "finetune_factors",
        "decode",
    }
    same_rows = {d.split(".", 1)[1] for d in EXECUTION_FIELDS if d.startswith("eval.")}
    same_rows |= {"accuracy_threshold"}
    assert same_rows <= set(NOT_READING)
    for name in NOT_READING:
        others = [(b, _changed(b, f"eval.{name}", OTHER_EVAL[name])) for b in bases]
        assert any(o is not None for _, o in others), f"eval.{name}: no valid trial to change it in"
        for base, other in others:
            if other is None:
                continue
            before, after = trial_stages(base), trial_stages(other)
            assert other.trial_id == base.trial_id
            assert after[1].name == before[1].name and after[1].name.startswith("eval-"), name
            if name in same_rows:
                assert [s.name for s in after] == [s.name for s in before], name


def test_every_decode_field_renames_the_decode_stage_only(bases):
    assert tuple(f.name for f in dataclasses.fields(DecodeConfig)) == DECODE_FIELDS
    assert not {"reading", "scalings"} & set(DECODE_FIELDS)  # flat in the decode key
    base = bases[0]
    for name in DECODE_FIELDS:
        other = _changed(base, f"eval.decode.{name}", OTHER_DECODE[name])
        assert other is not None, name
        before, after = trial_stages(base), trial_stages(other)
        assert before[-1].kind == after[-1].kind == "decode" and before[-1].name != after[-1].name
        assert [s.name for s in after[:-1]] == [s.name for s in before[:-1]], name
        assert other.trial_id == base.trial_id

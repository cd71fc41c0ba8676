"""Stage keys: the trial id names the trained model; each stage's name changes exactly when
what decides its rows changes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.config import replace, validate
from rope_lab.trial.scaling_plan import Scaling
from rope_lab.trial.stage_plan import (
    READING_FIELDS,
    TRAIN,
    eval_stages,
    find_stage,
    scaling_stage_name,
    trial_stages,
)
from tests.helpers import tiny_trial


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

"""Tests for the task registry, make_task, task_from_config and check_trial."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable

import numpy as np
import pytest

from rope_lab import config, registry
from rope_lab.config import (
    ConfigError,
    EvalConfig,
    NTKConfig,
    TaskConfig,
    TrainConfig,
    TrialConfig,
    freeze,
)
from rope_lab.tasks import (
    TASKS,
    MQARTask,
    PasskeyTask,
    SyntheticLMTask,
    TextLMTask,
    check_trial,
    make_task,
    task_from_config,
)
from tests.tasks.common import LENGTHS, task_module

# The tasks rope_lab ships, in listing order (configs and sweeps name them); any other
# registered task is checked alike, from its class attributes and its own test module.
BUILT_IN = ("passkey", "mqar", "copy", "flipflop", "lm_synthetic", "lm_text")


def test_registry_names() -> None:
    names = registry.TASKS.names()
    assert [n for n in names if n in BUILT_IN] == list(BUILT_IN)
    assert set(TASKS) == set(names)
    for name, cls in TASKS.items():
        assert cls.name == name
    assert TASKS["passkey"] is PasskeyTask and TASKS["mqar"] is MQARTask
    assert TASKS["lm_synthetic"] is SyntheticLMTask and TASKS["lm_text"] is TextLMTask


def test_unknown_task_lists_names() -> None:
    with pytest.raises(ValueError, match="unknown task 'pasky'") as info:
        make_task("pasky", 32)
    for name in TASKS:
        assert name in str(info.value)
    assert "Did you mean 'passkey'" in str(info.value)


def test_unknown_param_is_named() -> None:
    with pytest.raises(ValueError, match="unknown parameter 'needle_len'") as info:
        make_task("passkey", 32, needle_len=3)
    assert "Did you mean 'needle_length'" in str(info.value)
    with pytest.raises(ValueError, match="unknown parameter 'data'"):
        make_task("copy", 32, data=3)


# ------------------------------------------------------------------------------------------
# registry entries: typed parameters with today's names and defaults (each task's test module
# lists them as PARAMS), and class attributes that say what the task does
# ------------------------------------------------------------------------------------------

MISSING = dataclasses.MISSING


@pytest.mark.parametrize("name", list(TASKS))
def test_registry_entries_are_typed_parameters(name: str) -> None:
    entry = registry.TASKS[name]
    params = task_module(name).PARAMS  # {parameter: (type, default)}
    assert dataclasses.is_dataclass(entry) and entry.__dataclass_params__.frozen
    assert entry.name == name and TASKS[name].name == name
    assert isinstance(entry.display_name, str) and entry.display_name
    assert entry.default_metric in ("loss", "accuracy", "bits_per_byte")
    # bits per byte needs the bytes a token stands for: text tasks only
    assert (entry.default_metric == "bits_per_byte") == entry.is_text
    hints = typing.get_type_hints(entry)
    fields = {f.name: (hints[f.name], f.default) for f in dataclasses.fields(entry)}
    assert fields == params
    task_cls = TASKS[name]  # the task class is the parameters plus vocab_size
    assert issubclass(task_cls, entry) and task_cls.display_name == entry.display_name
    assert [f.name for f in task_cls.param_fields()] == list(params)


def test_the_built_in_tasks_attributes() -> None:
    """Known answers for the attribute laws below."""
    text = [n for n in BUILT_IN if registry.TASKS[n].is_text]
    at_end = [n for n in BUILT_IN if registry.TASKS[n].answer_at_end]
    assert (text, at_end) == (["lm_text"], ["passkey", "copy"])


def one_answer_at_end(mask: np.ndarray) -> bool:
    """Each row's scored targets are its last m positions, the same m in every row, after a
    prompt (0 < m < L): what decode evaluation generates."""
    m, length = mask.sum(axis=1), mask.shape[1]
    suffix = np.arange(length)[None, :] >= length - m[:, None]
    return bool((m == m[0]).all() and 0 < m[0] < length and (mask == suffix).all())


@pytest.mark.parametrize("name", list(TASKS))
def test_is_text_and_answer_at_end_say_what_the_task_does(
    name: str, tasks: dict, batches: dict
) -> None:
    """`is_text`: the train and eval splits read different operands (text); `answer_at_end`:
    every batch (each length of the shared task tests) scores one answer at the end."""
    entry, task = registry.TASKS[name], tasks[name]
    train, held_out = task.operands("train"), task.operands("eval")
    assert len(train) == len(held_out)
    splits_differ = any(
        not np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(train, held_out, strict=True)
    )
    assert entry.is_text is splits_differ
    at_end = [one_answer_at_end(batches[name, length][2]) for length in LENGTHS]
    assert entry.answer_at_end is all(at_end), at_end


def test_parameters_round_trip_through_make_task(tasks: dict) -> None:
    for name, entry in registry.TASKS.items():
        task = tasks[name]
        values = {f.name: getattr(task, f.name) for f in dataclasses.fields(entry)}
        assert task.values() == values
        assert make_task(name, task.vocab_size, **values) == task
        assert entry(**values).build(task.vocab_size) == task
        assert entry.from_kwargs(**values) == entry(**values)
        config = TaskConfig(name=name, vocab_size=task.vocab_size, params=freeze(values))
        assert task_from_config(config) == task
        defaults = {f.name: f.default for f in dataclasses.fields(entry)}
        if MISSING not in defaults.values():
            assert make_task(name, task.vocab_size, **defaults) == make_task(name, task.vocab_size)
            assert entry().build(task.vocab_size) == make_task(name, task.vocab_size)


@pytest.mark.parametrize("name", list(TASKS))
def test_unknown_parameter_names_it_and_the_allowed(name: str) -> None:
    allowed = [f.name for f in dataclasses.fields(registry.TASKS[name])]
    with pytest.raises(ValueError, match=f"unknown parameter 'bogus' for task '{name}'") as info:
        make_task(name, 256, bogus=1)
    assert f"valid parameters: {', '.join(allowed)}." in str(info.value)


def test_invalid_value_is_raised_by_build() -> None:
    with pytest.raises(ValueError, match="passkey: needle_length must be >= 1"):
        registry.TASKS["passkey"](needle_length=0).build(32)


# ------------------------------------------------------------------------------------------
# check_trial: the task rules of config.validate
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_100(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "hundred.txt"
    path.write_bytes(bytes(range(100)))
    return str(path)


def _trial(
    task: str,
    vocab: int,
    params: dict | None = None,
    *,
    multipliers: tuple[float, ...] = (0.5, 1.0, 2.0),
    factors: tuple[float, ...] = (2.0,),
    finetune: int = 0,
    ntk: bool = True,
) -> TrialConfig:
    return TrialConfig(
        task=TaskConfig(name=task, vocab_size=vocab, params=freeze(params or {})),
        train=TrainConfig(length=16, batch_size=8, steps=10, warmup_steps=2, log_every=5),
        eval=EvalConfig(
            length_multipliers=multipliers,
            batches=1,
            batch_size=4,
            position_buckets=2,
            methods=("linear",),
            factors=factors,
            finetune_steps=finetune,
        ),
        ntk=NTKConfig(enabled=ntk, probe_multipliers=(2.0,)),
    )


TEXT = "CORPUS"  # replaced by the corpus path
CASES = [  # (task, vocab, params, trial options, expected message start or None: valid)
    ("passkey", 24, {"needle_length": 2}, {}, None),
    ("pasky", 24, {}, {}, "task.name: unknown task 'pasky'; allowed: passkey, mqar, copy"),
    ("passkey", 24, {"needle_length": 0}, {}, "task: passkey: needle_length must be >= 1"),
    ("passkey", 24, {"needle_len": 2}, {}, "task: unknown parameter 'needle_len'"),
    ("flipflop", 4, {}, {}, "task: flipflop: vocab_size=4 is too small"),
    ("lm_text", 256, {}, {}, "task: task 'lm_text' needs parameter(s): path"),
    ("passkey", 24, {"needle_length": 8}, {}, "train.length: length 16 does not fit the task"),
    ("copy", 24, {"segment_length": 10}, {}, "train.length: length 16 does not fit the task"),
    ("passkey", 24, {"needle_length": 4}, {}, "eval.length_multipliers: length 8 does not fit"),
    ("mqar", 12, {"num_pairs": 2, "pair_density": 0.25}, {}, "eval.length_multipliers: length 32"),
    (
        "mqar",
        12,
        {"num_pairs": 2, "pair_density": 0.25},
        {"multipliers": (0.5, 1.0), "ntk": False},
        None,
    ),
    (
        "mqar",
        12,
        {"num_pairs": 2, "pair_density": 0.25},
        {"multipliers": (0.5, 1.0), "finetune": 5},
        "eval.factors: length 32 does not fit the task",
    ),
    (
        "mqar",
        12,
        {"num_pairs": 2, "pair_density": 0.25},
        {"multipliers": (0.5, 1.0), "finetune": 5, "factors": (1.0,)},
        "ntk.probe_multipliers: length 32 does not fit the task",
    ),
    ("lm_text", 256, {"path": TEXT, "eval_fraction": 0.5}, {"finetune": 5}, None),
    (
        "lm_text",
        256,
        {"path": TEXT, "eval_fraction": 0.5},
        {"finetune": 5, "factors": (4.0,)},
        "eval.factors: length 64 does not fit the task: lm_text: the train split",
    ),
    (
        "lm_text",
        256,
        {"path": TEXT, "eval_fraction": 0.9},
        {},
        "train.length: length 16 does not fit the task: lm_text: the train split",
    ),
    (
        "lm_text",
        256,
        {"path": TEXT, "eval_fraction": 0.1},
        {"multipliers": (0.5,)},
        "train.length: length 16 does not fit the task: lm_text: the eval split",
    ),
    (
        "lm_text",
        256,
        {"path": TEXT, "eval_fraction": 0.1},
        {"multipliers": (0.5,), "ntk": False},
        None,
    ),
    (
        "lm_text",
        256,
        {"path": TEXT, "eval_fraction": 0.1},
        {"multipliers": (0.5, 1.0), "ntk": False},
        "eval.length_multipliers: length 16 does not fit the task: lm_text: the eval split",
    ),
]


def _outcome(check: Callable[[TrialConfig], object], cfg: TrialConfig) -> str | None:
    try:
        check(cfg)
    except ConfigError as err:
        return str(err)
    return None


@pytest.mark.parametrize(("task", "vocab", "params", "options", "expected"), CASES)
def test_check_trial_matches_config_validate(
    task: str, vocab: int, params: dict, options: dict, expected: str | None, corpus_100: str
) -> None:
    params = {k: corpus_100 if v == TEXT else v for k, v in params.items()}
    cfg = _trial(task, vocab, params, **options)
    outcome = _outcome(check_trial, cfg)
    assert outcome == _outcome(config.validate, cfg)
    if expected is None:
        assert outcome is None
    else:
        assert outcome is not None and outcome.startswith(expected), outcome


@pytest.mark.parametrize("name", list(TASKS))
def test_check_trial_matches_config_validate_for_every_task(name: str, corpus_100: str) -> None:
    """Every registered task, at the small parameters of its test module."""
    cfg = _trial(name, 256, task_module(name).tiny_params(corpus_100))
    assert _outcome(check_trial, cfg) == _outcome(config.validate, cfg)

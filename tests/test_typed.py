"""Typed parameters: `task.params`, `eval.method_params` and a rotary encoding's `params` are
checked against the registered variant's fields when a config is loaded, for every registered
task and scaling, and stored as written (so ids hashed from them do not move)."""

import dataclasses
import re
import typing

import pytest

from rope_lab.config import ConfigError, TrialConfig, from_dict
from rope_lab.registry import POSITIONS, SCALINGS, TASKS
from rope_lab.sweep.spec import parse_spec
from rope_lab.trial.ids import config_hash
from rope_lab.typed import check_params

# A value no scalar, tuple or optional field accepts.
WRONG = {"not": "a value"}


def _fields(variant: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(variant) if f.init]


def _rotary_kinds() -> list[str]:
    return [k for k in POSITIONS.names() if "params" in {f.name for f in _fields(POSITIONS[k])}]


def _cases():
    for name in TASKS.names():
        for f in _fields(TASKS[name]):
            yield pytest.param(
                {"task": {"name": name, "params": {f.name: WRONG}}},
                f"task.params.{f.name}",
                id=f"task-{name}-{f.name}",
            )
    for name in SCALINGS.names():
        for f in _fields(SCALINGS[name]):
            data = {"eval": {"method_params": {name: {f.name: WRONG}}}}
            yield pytest.param(
                data, f"eval.method_params.{name}.{f.name}", id=f"scaling-{name}-{f.name}"
            )
    for kind in _rotary_kinds():
        for name in SCALINGS.names():
            for f in _fields(SCALINGS[name]):
                rotary = {"scaling": name, "factor": 2.0, "params": {f.name: WRONG}}
                data = {"model": {"position": {"kind": kind, kind: rotary}}}
                yield pytest.param(
                    data, f"model.position.{kind}.params.{f.name}", id=f"{kind}-{name}-{f.name}"
                )


@pytest.mark.parametrize(("data", "path"), list(_cases()))
def test_a_wrongly_typed_parameter_names_its_key_path(data, path):
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}(\[0\])?: expected"):
        from_dict(TrialConfig, data)


def _owners():
    for name in TASKS.names():
        yield {"task": {"name": name, "params": {"nope": 1}}}, "task.params", TASKS[name]
    for name in SCALINGS.names():
        yield (
            {"eval": {"method_params": {name: {"nope": 1}}}},
            f"eval.method_params.{name}",
            SCALINGS[name],
        )


@pytest.mark.parametrize(("data", "path", "variant"), list(_owners()))
def test_an_unknown_parameter_lists_the_variants_fields(data, path, variant):
    allowed = ", ".join(sorted(f.name for f in _fields(variant)))
    with pytest.raises(ConfigError) as info:
        from_dict(TrialConfig, data)
    assert str(info.value) == f"{path}.nope: unknown key 'nope'; allowed: {allowed}"


def test_an_unknown_scaling_in_method_params_lists_the_registered_ones():
    with pytest.raises(
        ConfigError,
        match=r"^eval.method_params.yarnn: unknown value 'yarnn' "
        r"\(did you mean 'yarn'\?\); allowed: default, linear",
    ):
        from_dict(TrialConfig, {"eval": {"method_params": {"yarnn": {}}}})


def test_parameters_are_stored_as_written_so_hashes_do_not_move():
    # `depth` is a float field: an int written for it stays an int (its JSON, its hash)
    cfg = from_dict(TrialConfig, {"task": {"params": {"depth": 1, "needle_length": 3}}})
    assert cfg.task.params == (("depth", 1), ("needle_length", 3))
    assert type(dict(cfg.task.params)["depth"]) is int
    written = dataclasses.replace(TrialConfig().task, params=(("depth", 1), ("needle_length", 3)))
    assert config_hash(cfg.task) == config_hash(written)


def test_valid_values_of_every_field_type_pass():
    hints = typing.get_type_hints(SCALINGS["yarn"])
    assert hints["truncate"] == bool | None
    given = {"beta_fast": 16, "beta_slow": 1.5, "truncate": False, "mscale": None}
    assert check_params(SCALINGS["yarn"], given, "p") == tuple(sorted(given.items()))
    longrope = {"short_factor": [1, 2.5], "long_factor": (3.0,)}
    assert dict(check_params(SCALINGS["longrope"], longrope, "p")) == {
        "long_factor": (3.0,),
        "short_factor": (1, 2.5),
    }


def test_a_sweep_checks_parameters_against_the_task_another_axis_names():
    base = {
        "task": {"name": "passkey", "vocab_size": 24},
        "model": {"width": 32, "head_dim": 8},
        "train": {"length": 16, "steps": 1},
        "eval": {"length_multipliers": [1]},
    }
    good = [{"task.name": ["passkey", "copy"], "task.params": [{"needle_length": 2}, {}]}]
    spec = parse_spec({"name": "t", "base": base, "zip": good})
    assert [t.task.params for t in spec.trials] == [(("needle_length", 2),), ()]
    bad = [{"task.name": ["passkey", "copy"], "task.params": [{}, {"needle_length": 2}]}]
    with pytest.raises(ConfigError, match=r"task.params.needle_length: unknown key"):
        parse_spec({"name": "t", "base": base, "zip": bad})

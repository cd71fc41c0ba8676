"""Typed parameters: `task.params`, `eval.method_params` and a rotary encoding's `params` are
checked against the registered variant's fields when a config is loaded, for every registered
task and scaling, and stored as written (so ids hashed from them do not move)."""

import copy
import dataclasses
import re
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _float_hint(hint: typing.Any) -> bool:
    """float, float | None or tuple[float, ...]."""
    args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
    return hint is float or (bool(args) and all(a is float for a in args))


def _infinite(cls: type, name: str) -> bool:
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("infinite")


def _float_leaves() -> list[tuple[str, dict, bool]]:
    """(dotted key, the mapping around it that selects its variant, +inf allowed) of every
    float field of a trial config, every variant's and every task's and scaling's parameter."""
    from rope_lab.config import dotted_fields, variant_tag
    from rope_lab.sweep.plain import set_dotted

    out = []
    for key, hint in dotted_fields(TrialConfig).items():
        if _float_hint(hint):
            context: dict = {}
            if (tag := variant_tag(key)) is not None:
                set_dotted(context, *tag)
            owner, name = _owner_of(key), key.rsplit(".", 1)[-1]
            out.append((key, context, _infinite(owner, name)))
    for name in TASKS.names():
        for f in _fields(TASKS[name]):
            if _float_hint(typing.get_type_hints(TASKS[name])[f.name]):
                out.append((f"task.params.{f.name}", {"task": {"name": name}}, False))
    for name in SCALINGS.names():
        for f in _fields(SCALINGS[name]):
            if _float_hint(typing.get_type_hints(SCALINGS[name])[f.name]):
                out.append((f"eval.method_params.{name}.{f.name}", {}, False))
    return out


def _owner_of(key: str) -> type:
    """The dataclass that declares the dotted TrialConfig field `key`."""
    from rope_lab.typed import nested_dataclass

    cls: type = TrialConfig
    for part in key.split(".")[:-1]:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part in fields:
            cls = nested_dataclass(typing.get_type_hints(cls)[part]) or cls
        else:  # a registered variant's name
            cls = next(
                f.metadata["registry"][part]
                for f in fields.values()
                if "registry" in f.metadata and part in f.metadata["registry"]
            )
    return cls


FLOAT_LEAVES = _float_leaves()
NON_FINITE = (float("nan"), float("inf"), float("-inf"), "nan", "inf", "-Infinity")


def test_the_float_leaves_cover_every_section():
    keys = {k for k, _, _ in FLOAT_LEAVES}
    assert {"train.lr", "eval.factors", "ntk.ridge", "model.position.rope.theta"} <= keys
    assert "eval.method_params.llama3.low_freq_factor" in keys
    assert [k for k, _, inf in FLOAT_LEAVES if inf] == ["train.clip_norm"]
    assert len(keys) > 30


@given(leaf=st.sampled_from(FLOAT_LEAVES), value=st.sampled_from(NON_FINITE))
@settings(max_examples=150, deadline=None, derandomize=True)
def test_any_float_field_set_to_nan_or_an_infinity_is_refused_naming_its_key(leaf, value):
    from rope_lab.sweep.plain import set_dotted

    key, context, infinite = leaf
    data = copy.deepcopy(context)
    set_dotted(data, key, value)
    if infinite and value in (float("inf"), "inf"):
        from_dict(TrialConfig, data)  # "no limit"
        return
    wanted = "a finite number or .inf" if infinite else "a finite number"
    message = rf"^{re.escape(key)}(\[0\])?: expected {wanted}, got {re.escape(repr(value))}$"
    with pytest.raises(ConfigError, match=message):
        from_dict(TrialConfig, data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"train": {"lr": float("nan")}}, "train.lr: expected a finite number, got nan"),
        ({"train": {"steps": float("inf")}}, "train.steps: expected an integer, got inf"),
        ({"train": {"lr": True}}, "train.lr: expected a number, got True"),
        (
            {"train": {"clip_norm": float("-inf")}},
            "train.clip_norm: expected a finite number or .inf, got -inf",
        ),
    ],
)
def test_non_finite_numbers_exact_messages(data, message):
    with pytest.raises(ConfigError) as err:
        from_dict(TrialConfig, data)
    assert str(err.value) == message


def test_an_infinite_clip_norm_is_no_clipping_and_keeps_its_place_in_the_id():
    cfg = from_dict(TrialConfig, {"train": {"clip_norm": float("inf")}})
    assert cfg.train.clip_norm == float("inf")
    assert cfg.trial_id != from_dict(TrialConfig, {}).trial_id


def test_a_sweep_refuses_non_finite_grid_values_and_scaling_factors():
    spec = {
        "name": "s",
        "grid": {"train.lr": [1e-3, float("nan")]},
        "scaling": {"methods": ["linear"], "factors": [2, float("inf")]},
        "resources": {"num_cpus": float("inf")},
    }
    with pytest.raises(ConfigError) as err:
        parse_spec(spec)
    assert str(err.value).splitlines() == [
        "sweep spec: scaling.factors[1]: expected a finite number, got inf",
        "sweep spec: resources.num_cpus: expected a finite number, got inf",
        "sweep spec: grid.train.lr: expected a finite number, got nan",
    ]

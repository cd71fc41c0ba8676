"""A checkpoint's config.json is read field by field: a missing or mistyped field, a file that
is not a JSON object or not JSON at all, is one CheckpointError line naming the file and the key
(where a raw KeyError, ValueError, AttributeError or JSONDecodeError escaped, a 26-32 line
traceback on the command line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rope_lab.cli import main
from rope_lab.hf import CheckpointError, read_config
from rope_lab.hf.config import from_hf_dict
from rope_lab.typed import to_dict
from tests.helpers import tiny_trial

LLAMA = {
    "model_type": "llama",
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 56,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}
REQUIRED_INTEGERS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "max_position_embeddings")  # fmt: skip
NOT_AN_INTEGER = st.one_of(
    st.text(max_size=3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.integers(max_value=0),
)


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(REQUIRED_INTEGERS), drop=st.booleans())
def test_a_missing_required_field_is_named(key, drop):
    cfg = {k: v for k, v in LLAMA.items() if k != key} if drop else {**LLAMA, key: None}
    with pytest.raises(CheckpointError) as err:
        from_hf_dict(cfg, where="ckpt/config.json")
    assert str(err.value) == f"ckpt/config.json: {key} is missing"


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(REQUIRED_INTEGERS), value=NOT_AN_INTEGER)
def test_a_required_field_that_is_not_a_positive_integer_is_named(key, value):
    with pytest.raises(CheckpointError) as err:
        from_hf_dict({**LLAMA, key: value}, where="ckpt/config.json")
    assert str(err.value) == f"ckpt/config.json: {key} must be an integer >= 1, got {value!r}"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rms_norm_eps": "x"}, "rms_norm_eps must be a number, got 'x'"),
        ({"rms_norm_eps": 0}, "rms_norm_eps must be a number > 0, got 0"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false, got 'yes'"),
        ({"attention_bias": "false"}, "attention_bias must be true or false, got 'false'"),
        ({"hidden_act": 3}, "hidden_act must be a string, got 3"),
        ({"head_dim": 8.0}, "head_dim must be an integer >= 1, got 8.0"),
        ({"num_key_value_heads": "2"}, "num_key_value_heads must be an integer >= 1, got '2'"),
        ({"layer_types": "full_attention"},
         "layer_types must be a list of strings, got 'full_attention'"),
        ({"model_type": "mistral", "sliding_window": "10"},
         "sliding_window must be an integer >= 1, got '10'"),
        ({"rope_parameters": None, "rope_theta": "x"}, "rope_theta must be a number, got 'x'"),
        ({"rope_parameters": [1]}, "rope_parameters must be a JSON object, got [1]"),
        ({"partial_rotary_factor": 1.5}, "partial_rotary_factor must be in (0, 1], got 1.5"),
        ({"head_dim": 6, "partial_rotary_factor": 0.5},
         "head_dim 6 x partial_rotary_factor 0.5 = 3 rotated dims, an odd number"),
    ],
)  # fmt: skip
def test_a_mistyped_field_is_named(change, message):
    with pytest.raises(CheckpointError) as err:
        from_hf_dict({**LLAMA, **change}, where="ckpt/config.json")
    assert str(err.value) == f"ckpt/config.json: {message}"


def _folder(tmp_path: Path, text: str | bytes) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    file = folder / "config.json"
    file.write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "not a JSON object (got a list)"),
        ("null", "not a JSON object (got null)"),
        ('"llama"', "not a JSON object (got a string)"),
        ("{", "not valid JSON (Expecting property name enclosed in double quotes at line 1 "
              "column 2)"),
        ('{"model_type": "llama",\n "hidden_size": 32,}',
         "not valid JSON (Expecting property name enclosed in double quotes at line 2 "
         "column 20)"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)  # fmt: skip
def test_a_config_that_is_not_a_json_object_is_named(tmp_path, text, message):
    folder = _folder(tmp_path, text)
    with pytest.raises(CheckpointError) as err:
        read_config(folder)
    assert str(err.value) == f"{folder / 'config.json'}: {message}"


def test_the_command_line_prints_one_line(tmp_path, capsys):
    folder = _folder(tmp_path, json.dumps({**LLAMA, "hidden_size": "32"}))
    data = to_dict(tiny_trial("rope"))
    data["model"] = {"init": {"hf": str(folder)}}
    data["train"] = {k: v for k, v in data["train"].items() if k not in ("length", "steps")}
    data["task"].pop("vocab_size")
    trial = tmp_path / "trial.yaml"
    trial.write_text(yaml.safe_dump(data))
    assert main(["train", str(trial)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"rope-lab: error: {trial}: {folder / 'config.json'}: hidden_size must be an integer "
        ">= 1, got '32'\n"
    )

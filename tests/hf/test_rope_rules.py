"""A checkpoint's rope parameters are held to transformers' own rules: over a table of good and
bad rope blocks, rope_lab refuses exactly the blocks transformers refuses (raises) or calls
invalid (a warning that a key is missing, unrecognized, or must be something else), and each
refusal is one line naming the file and the key."""

from __future__ import annotations

import copy
import logging

import pytest

from rope_lab.hf import CheckpointError
from rope_lab.hf.config import from_hf_dict
from tests.hf.conftest import transformers_or_skip

FIELDS = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 56,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
}
MAX_POS = 64
FOUR = [1.0, 1.1, 1.3, 1.7]  # a LongRoPE factor per rotated pair of head_dim 8
# transformers' warnings that call a value invalid (its other warnings advise)
INVALID = ("must", "Missing required", "Unrecognized keys")
Y = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
L3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 16}  # fmt: skip
LR = {"rope_type": "longrope", "short_factor": FOUR, "long_factor": FOUR,
      "original_max_position_embeddings": 16}  # fmt: skip
Y_ALL = {**Y, "attention_factor": 1.0, "beta_fast": 16, "beta_slow": 2.0, "mscale": 1.0,
         "mscale_all_dim": 0.0, "truncate": False}  # fmt: skip
# (rope block, whether transformers 5.24.0 refuses or calls it invalid)
TABLE = [
    ({}, False),
    ({"rope_type": "default", "rope_theta": 500000.0}, False),
    ({"rope_type": "linear", "factor": 2.0}, False),
    ({"rope_type": "linear", "factor": 1}, False),
    ({"type": "linear", "factor": 2.0}, False),
    ({"rope_type": "dynamic", "factor": 4.0}, False),
    (Y, False),
    ({"rope_type": "yarn", "factor": 4.0}, False),  # original: max_position_embeddings
    ({**Y, "factor": 2.0}, False),  # not 64 / 16: transformers warns, then uses it
    (Y_ALL, False),
    ({**Y, "beta_slow": None}, False),
    (L3, False),
    ({**L3, "low_freq_factor": 1, "high_freq_factor": 4}, False),
    (LR, False),
    ({**LR, "factor": 4, "attention_factor": 1}, False),
    ({"rope_type": "linear"}, True),
    ({"rope_type": "linear", "factor": None}, True),
    ({"rope_type": "dynamic"}, True),
    ({"rope_type": "yarn", "original_max_position_embeddings": 16}, True),
    ({k: v for k, v in L3.items() if k != "factor"}, True),
    ({k: v for k, v in L3.items() if k != "low_freq_factor"}, True),
    ({k: v for k, v in L3.items() if k != "high_freq_factor"}, True),
    ({k: v for k, v in LR.items() if k != "short_factor"}, True),
    ({k: v for k, v in LR.items() if k != "long_factor"}, True),
    ({"rope_type": "linear", "factor": 0.5}, True),
    ({"rope_type": "dynamic", "factor": "2"}, True),
    ({**Y, "factor": 0.9}, True),
    ({**Y, "attention_factor": -1.0}, True),
    ({**Y, "attention_factor": 1}, True),  # transformers: a float
    ({**Y, "beta_fast": 1.0, "beta_slow": 2.0}, True),
    ({**Y, "beta_fast": "a"}, True),
    ({**LR, "short_factor": FOUR[:3]}, True),
    ({**LR, "long_factor": [*FOUR, 2.0]}, True),
    ({**LR, "long_factor": ["a", 1.0, 1.0, 1.0]}, True),
    ({**LR, "factor": 0.5}, True),
    ({**LR, "attention_factor": -0.1}, True),
    ({**L3, "low_freq_factor": 4.0, "high_freq_factor": 1.0}, True),
    ({**L3, "high_freq_factor": 1.0}, True),
    ({**L3, "original_max_position_embeddings": MAX_POS}, True),
    ({**L3, "original_max_position_embeddings": 16.0}, True),
    ({**L3, "low_freq_factor": "1"}, True),
    ({"rope_type": "default", "factor": 2.0}, True),
    ({"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 16}, True),
    ({**Y, "low_freq_factor": 1.0}, True),
]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _transformers_refuses(block: dict) -> bool:
    """transformers' LlamaConfig with this block raises, or warns that it is invalid."""
    _, transformers = transformers_or_skip()
    logger = logging.getLogger("transformers.modeling_rope_utils")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        transformers.LlamaConfig(
            **FIELDS, max_position_embeddings=MAX_POS, rope_parameters=copy.deepcopy(block)
        )
    except Exception:  # any refusal counts
        return True
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return any(word in message for message in handler.messages for word in INVALID)


def _rope_lab_refuses(block: dict) -> bool:
    cfg = {"model_type": "llama", **FIELDS, "max_position_embeddings": MAX_POS}
    try:
        from_hf_dict({**cfg, "rope_parameters": copy.deepcopy(block)}, where="x/config.json")
    except CheckpointError as err:
        assert str(err).startswith("x/config.json: ") and "\n" not in str(err)
        return True
    return False


def test_rope_lab_refuses_exactly_where_transformers_does():
    """Each row's verdict is pinned for both, so a transformers upgrade that moves a rule
    shows here."""
    verdicts = [(_transformers_refuses(block), _rope_lab_refuses(block)) for block, _ in TABLE]
    for (block, expected), (theirs, ours) in zip(TABLE, verdicts, strict=True):
        assert (theirs, ours) == (expected, expected), block
    assert {e for _, e in TABLE} == {True, False}


def _refusal(block: dict, **fields) -> str:
    cfg = {"model_type": "llama", **FIELDS, "max_position_embeddings": MAX_POS, **fields}
    with pytest.raises(CheckpointError) as err:
        from_hf_dict({**cfg, "rope_parameters": block}, where="ckpt/config.json")
    return str(err.value)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"rope_type": "yarn"}, "rope_parameters.factor is missing (rope_type 'yarn' requires it)"),
        ({**L3, "low_freq_factor": None},
         "rope_parameters.low_freq_factor is missing (rope_type 'llama3' requires it)"),
        ({"rope_type": "linear", "factor": 0.5},
         "rope_parameters.factor must be a number >= 1, got 0.5"),
        ({"rope_type": "linear", "factor": True},  # transformers reads true as 1
         "rope_parameters.factor must be a number, got True"),
        ({**Y, "attention_factor": 1},
         "rope_parameters.attention_factor must be a float >= 0, got 1"),
        ({**Y, "beta_fast": 1.0, "beta_slow": 2.0},
         "rope_parameters.beta_fast must be >= beta_slow 2, got 1"),
        ({**L3, "high_freq_factor": 1.0},
         "rope_parameters.high_freq_factor must be greater than low_freq_factor 1, got 1"),
        ({**L3, "original_max_position_embeddings": 64},
         "rope_parameters.original_max_position_embeddings must be less than "
         "max_position_embeddings 64, got 64"),
        ({**LR, "short_factor": FOUR[:3]},
         "rope_parameters.short_factor must have 4 entries, half of head_dim 8 x "
         "partial_rotary_factor 1 = 8 rotated dims; got 3"),
        ({"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 16},
         "rope_parameters: rope parameter(s) ['original_max_position_embeddings'] of rope_type "
         "'linear' are not supported"),
        ({"rope_type": "default", "rope_theta": "1e4"},
         "rope_parameters.rope_theta must be a number, got '1e4'"),
        ("yarn", "rope_parameters must be a JSON object, got 'yarn'"),
    ],
)  # fmt: skip
def test_each_rope_refusal_names_the_file_and_the_key(block, message):
    assert _refusal(block) == f"ckpt/config.json: {message}"


def test_the_older_rope_scaling_is_named_as_such_and_the_training_length_is_transformers():
    assert _refusal(None, rope_scaling={"type": "linear"}) == (
        "ckpt/config.json: rope_scaling.factor is missing (rope_type 'linear' requires it)"
    )
    cfg = {"model_type": "llama", **FIELDS, "max_position_embeddings": MAX_POS}
    # no original_max_position_embeddings: transformers takes max_position_embeddings
    arch = from_hf_dict({**cfg, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
    assert (arch.train_length, arch.model.position.options.factor) == (MAX_POS, 4.0)
    # Phi-3 reads its own top-level field, default 4096, over the rope parameters'
    phi3 = {**cfg, "model_type": "phi3", "max_position_embeddings": 8192,
            "rope_parameters": {**LR, "original_max_position_embeddings": 16}}  # fmt: skip
    assert from_hf_dict(phi3).train_length == 4096
    assert from_hf_dict({**phi3, "original_max_position_embeddings": 2048}).train_length == 2048

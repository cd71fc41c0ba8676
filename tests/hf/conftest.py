"""Tiny random-weight checkpoints of every supported family, written by `transformers` (the
`hf` extra) to a session folder, with their reference logits computed once."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import unavailable

ORIGINAL = 16  # the checkpoints' trained context
LENGTHS = (12, 40)  # below and beyond it
VOCAB = 96
# rope_parameters of each rope_type (beyond the theta); original context 16
ROPE_TYPES = {
    "default": {},
    "linear": {"factor": 2.0},
    "dynamic": {"factor": 2.0},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL, "beta_fast": 8.0},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": ORIGINAL,
    },
    "longrope": {
        "short_factor": [1.0, 1.1, 1.3, 1.7],
        "long_factor": [1.0, 2.0, 5.0, 9.0],
        "original_max_position_embeddings": ORIGINAL,
    },
}


def _families():
    """(config class name, its fields): each family's own features at a tiny size."""
    common = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 56,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    return {
        # a large epsilon, so an ignored one shows in the logits
        "llama": ("LlamaConfig", {**common, "num_key_value_heads": 2, "rms_norm_eps": 0.1}),
        "smollm2": (
            "LlamaConfig",
            {**common, "num_key_value_heads": 1, "tie_word_embeddings": True},
        ),
        "mistral": ("MistralConfig", {**common, "num_key_value_heads": 2, "sliding_window": 10}),
        "qwen2": ("Qwen2Config", {**common, "num_key_value_heads": 2}),
        "qwen3": ("Qwen3Config", {**common, "num_key_value_heads": 2, "head_dim": 16}),
        "phi3": (
            "Phi3Config",
            {**common, "hidden_size": 64, "num_key_value_heads": 2, "partial": 0.5},
        ),
        # RoPE and NoPE layers alternating: rope_lab's layout (rope, none) repeated twice
        "smollm3": (
            "SmolLM3Config",
            {
                **common,
                "num_hidden_layers": 4,
                "num_key_value_heads": 2,
                "no_rope_layers": [1, 0, 1, 0],
            },
        ),
        # norms after attention and MLP, QK-norm over the whole projection
        "olmo2": ("Olmo2Config", {**common, "num_key_value_heads": 2}),
        # three sliding-window layers (window 5) with a rope base of their own, then a full one
        "olmo3": (
            "Olmo3Config",
            {
                **common,
                "num_hidden_layers": 4,
                "num_key_value_heads": 2,
                "sliding_window": 5,
                "sliding": {"rope_type": "default", "rope_theta": 500.0},
            },
        ),
        # sandwich norms, GeGLU, scaled embedding, zero-centred norms, a query scalar other
        # than the head size (16), soft-capped logits; sliding layers (window 5, a rope base
        # of their own) alternating with full ones
        "gemma3": (
            "Gemma3TextConfig",
            {
                **common,
                "num_hidden_layers": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "query_pre_attn_scalar": 12,
                "final_logit_softcapping": 3.0,
                "sliding_window": 5,
                "layer_types": ["sliding_attention", "full_attention"] * 2,
                "sliding": {"rope_type": "default", "rope_theta": 500.0},
            },
        ),
        # parallel block with one LayerNorm (no bias; a large epsilon, so an ignored one
        # shows), logits scaled by 0.5, interleaved rotary pairs on the sliding layers
        # (window 5), NoPE full layers; no end-of-sequence token, at which its greedy
        # decoding (tests/hf/test_from_hf.py) would stop early
        "cohere2": (
            "Cohere2Config",
            {
                **{k: v for k, v in common.items() if k != "rms_norm_eps"},
                "eos_token_id": None,
                "num_hidden_layers": 4,
                "num_key_value_heads": 2,
                "layer_norm_eps": 0.1,
                "logit_scale": 0.5,
                "sliding_window": 5,
                "layer_types": ["sliding_attention", "full_attention"] * 2,
            },
        ),
    }


FAMILIES = tuple(_families())


@dataclass
class Checkpoint:
    folder: Path
    hf: object  # the transformers model (eval mode)
    rope_type: str


def transformers_or_skip():
    try:
        import torch
        import transformers
    except ImportError:
        unavailable("needs the `hf` extra: pip install -e '.[hf]' (torch, transformers)")
    return torch, transformers


def make_checkpoint(family: str, rope_type: str, root: Path) -> Checkpoint:
    """A random-weight checkpoint of `family` under `rope_type`, saved under `root`; every
    weight redrawn at a scale that gives O(1) logits (norm weights around 1)."""
    torch, transformers = transformers_or_skip()
    name, fields = _families()[family]
    fields = dict(fields)
    partial = fields.pop("partial", None)
    sliding = fields.pop("sliding", None)
    rope = {"rope_type": rope_type, "rope_theta": 10000.0, **ROPE_TYPES[rope_type]}
    if partial is not None:
        rope["partial_rotary_factor"] = partial
    if rope_type == "default":
        fields["max_position_embeddings"] = ORIGINAL
    elif rope_type in ("linear", "dynamic"):
        fields["max_position_embeddings"] = ORIGINAL  # HF reads the trained context here
    if rope_type == "longrope" and partial is None:
        head = fields.get("head_dim") or fields["hidden_size"] // fields["num_attention_heads"]
        rope["short_factor"] = list(np.linspace(1.0, 1.5, head // 2))
        rope["long_factor"] = list(np.linspace(1.0, 8.0, head // 2))
    if family == "phi3":
        fields["original_max_position_embeddings"] = ORIGINAL
    if sliding is not None:
        rope = {"full_attention": rope, "sliding_attention": sliding}
    config = getattr(transformers, name)(**fields, rope_parameters=rope)
    torch.manual_seed(zlib.crc32(f"{family}-{rope_type}".encode()))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.3 if p.ndim == 1 else p.shape[-1] ** -0.5))
    folder = root / f"{family}-{rope_type}"
    model.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] in (
        "llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "olmo2", "olmo3", "gemma3_text",
        "cohere2",
    )  # fmt: skip
    return Checkpoint(folder, model, rope_type)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """`get(family, rope_type)`: the checkpoint, built once per session."""
    root = tmp_path_factory.mktemp("hf")
    built: dict[tuple[str, str], Checkpoint] = {}

    def get(family: str, rope_type: str = "default") -> Checkpoint:
        if (family, rope_type) not in built:
            built[family, rope_type] = make_checkpoint(family, rope_type, root)
        return built[family, rope_type]

    return get


def hf_logits(ckpt: Checkpoint, tokens: np.ndarray) -> np.ndarray:
    """transformers' logits (B, L, V) of tokens (B, L), float32."""
    torch, _ = transformers_or_skip()
    with torch.no_grad():
        return ckpt.hf(torch.as_tensor(tokens)).logits.float().numpy()

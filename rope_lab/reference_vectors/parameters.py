"""What the reference tables cover, as plain data: the positions of the cos/sin table, the tiny
model's sizes, seed and forward lengths, every method's base configurations (`BASE`, `PARTIAL`),
the edge cases of each scaling field engines get wrong (`FIELD_CASES`: YaRN's ramp bounds and
mscale, explicit attention factors, Llama 3's bands, the remaps' windows, partial rotary) and
example values of required fields without a default (`REQUIRED_EXAMPLES`). `grid.py` turns
them into cases; nothing here reads the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

# positions of the cos/sin table: small ones, and large ones where float32 position x
# frequency rounds differently between engines (2^12 - 1, 2^15 - 1, 2^17 - 1)
POSITIONS = (0, 1, 100, 4095, 4096, 32767, 131071)
# the tiny model: a Llama (RMSNorm, SwiGLU, grouped-query attention, full rotary)
MODEL: dict[str, Any] = {
    "width": 64,
    "depth": 2,
    "heads": 4,
    "head_dim": 16,
    "kv_heads": 2,
    "mlp_ratio": 2.0,
    "norm": "rmsnorm",
    "mlp": "swiglu",
    "norm_eps": 1e-5,
}
VOCAB = 64
TRAIN_LENGTH = 32  # the tiny model's training length: original_length of its scalings
MODEL_FACTOR = 4.0
MODEL_THETA = 10000.0
LOGIT_LENGTHS = (16, 32, 128)  # below, at and 4x beyond the training length
SEED = 0
# YaRN beta that puts both ramp bounds at dim 12.9995 for d=64, theta=1e4, L=1024 (as the
# golden file's case): index 13 sits half-way through HF's 0.001-wide guard ramp
_B = 1024 / (2 * math.pi * math.exp(12.9995 * 2 * math.log(10000.0) / 64))

# (rotary_dim, theta, factor, original_length, note): every method's base configurations
BASE = (
    (64, 10000.0, 4.0, 2048, "base"),
    (128, 1e6, 16.0, 4096, "large theta"),
    (96, 1e6, 16.0, 2048, "2i/d inexact in float32"),
    (128, 500000.0, 8.0, 8192, "Llama 3.1 sizes"),
    (16, 10000.0, 2.0, 256, "small dim"),
    (64, 10000.0, 2.0, 512, "factor 2"),
    (64, 10000.0, 1.0, 2048, "factor 1"),
)
# partial rotary: (head_dim, rotary_dim) for methods without their own partial_rotary_factor
PARTIAL = ((96, 48), (128, 32))

# field -> value for a method's required field (no default): (rotary_dim, factor) -> value
REQUIRED_EXAMPLES: dict[str, Callable[[int, float], Any]] = {
    "low_freq_factor": lambda d, f: 1.0,
    "high_freq_factor": lambda d, f: 4.0,
    "short_factor": lambda d, f: tuple(np.round(np.linspace(1.0, 1.2, d // 2), 4).tolist()),
    "long_factor": lambda d, f: tuple(
        np.round(np.linspace(1.0, max(1.0, 2.0 * f), d // 2), 4).tolist()
    ),
}

# field -> its edge cases: (rotary_dim, theta, factor, original_length, params, note)
EdgeCase = tuple[int, float, float, int, dict[str, Any], str]
FIELD_CASES: dict[str, tuple[EdgeCase, ...]] = {
    "beta_fast": (
        (64, 10000.0, 40.0, 4096, {"beta_fast": 16, "beta_slow": 2}, "betas 16 / 2"),
        (
            64,
            10000.0,
            8.0,
            1024,
            {"beta_fast": 4.0, "beta_slow": 4.0, "truncate": False},
            "ramp low == high: HF widens it by 0.001",
        ),
        (
            64,
            10000.0,
            8.0,
            1024,
            {"beta_fast": _B, "beta_slow": _B, "truncate": False},
            "ramp bounds 12.9995: index 13 half-way through the 0.001 guard",
        ),
        (64, 10000.0, 8.0, 64, {}, "low bound clamped to 0"),
        (32, 10000.0, 8.0, 4, {}, "tiny length: low == high == 0 after clamping"),
        (32, 10000.0, 8.0, 1, {}, "length 1: high bound below 0"),
        (
            32,
            100.0,
            8.0,
            10_000_000,
            {},
            "huge length, small theta: bounds clamped to d - 1 (not d/2 - 1)",
        ),
        (
            64,
            10000.0,
            4.0,
            2048,
            {"beta_fast": 1.0, "beta_slow": 32.0},
            "beta_fast < beta_slow: HF warns and computes anyway",
        ),
    ),
    "truncate": (
        (64, 10000.0, 4.0, 2048, {"truncate": False}, "bounds not floored / ceiled"),
        (128, 1e6, 16.0, 4096, {"truncate": False}, "bounds not floored / ceiled"),
        (16, 10000.0, 2.0, 256, {"truncate": False}, "bounds not floored / ceiled"),
    ),
    "mscale": (
        (
            64,
            10000.0,
            4.0,
            2048,
            {"mscale": 0.707, "mscale_all_dim": 0.707},
            "mscale == mscale_all_dim: attention factor 1",
        ),
        (
            64,
            10000.0,
            40.0,
            4096,
            {"mscale": 1.0, "mscale_all_dim": 0.5},
            "attention factor mscale(s, 1) / mscale(s, 0.5)",
        ),
        (64, 10000.0, 4.0, 2048, {"mscale": 1.0}, "mscale alone is ignored: 0.1 ln s + 1"),
        (
            64,
            10000.0,
            4.0,
            2048,
            {"mscale": 0.0, "mscale_all_dim": 1.0},
            "mscale 0 counts as unset (HF tests truthiness): 0.1 ln s + 1",
        ),
        (
            128,
            10000.0,
            40.0,
            4096,
            {"mscale": 1.0, "mscale_all_dim": 1.0},
            "DeepSeek-V3 style: ratio 1",
        ),
    ),
    "attention_factor": (
        (
            64,
            10000.0,
            4.0,
            2048,
            {"attention_factor": 0.8, "mscale": 1.0, "mscale_all_dim": 2.0},
            "explicit attention_factor wins over mscale",
        ),
        (64, 10000.0, 4.0, 2048, {"attention_factor": 1.0}, "explicit attention_factor 1.0"),
        (64, 10000.0, 4.0, 2048, {"attention_factor": 1.3}, "explicit attention_factor 1.3"),
    ),
    "low_freq_factor": (
        (
            64,
            500000.0,
            32.0,
            8192,
            {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
            "Llama 3.2 sizes",
        ),
        (64, 10000.0, 4.0, 1024, {"low_freq_factor": 2.0, "high_freq_factor": 8.0}, "bands 2 / 8"),
        (16, 10000.0, 8.0, 64, {"low_freq_factor": 0.5, "high_freq_factor": 1.5}, "small"),
        (
            16,
            10000.0,
            8.0,
            8,
            {"low_freq_factor": 8 / (2 * math.pi), "high_freq_factor": 4.0},
            "low wavelength threshold exactly at frequency 0's wavelength 2 pi",
        ),
        (
            16,
            10000.0,
            8.0,
            8,
            {"low_freq_factor": 0.5, "high_freq_factor": 8 / (2 * math.pi)},
            "high wavelength threshold exactly at frequency 0's wavelength 2 pi",
        ),
    ),
    # relative-position remaps (their own fields, in tokens)
    "window": (
        (16, 10000.0, 4.0, 256, {"window": 1}, "window 1: only the diagonal exact"),
        (16, 10000.0, 4.0, 256, {"window": 4096}, "window past every length: direct RoPE"),
    ),
    "chunk_size": (
        (16, 10000.0, 1.0, 256, {"chunk_size": 8, "local_window": 0}, "no local window"),
        (16, 10000.0, 1.0, 256, {"chunk_size": 8, "local_window": 7}, "chunks of one token"),
    ),
    "shift": (
        (16, 10000.0, 1.0, 256, {"shift": 2, "local_window": 1}, "smallest shift"),
        (16, 10000.0, 1.0, 131072, {}, "the authors' sizes: shift L / 3, local value 128"),
    ),
    "partial_rotary_factor": (
        (16, 10000.0, 1.0, 2048, {"partial_rotary_factor": 0.5}, ""),
        (64, 1e6, 4.0, 2048, {"partial_rotary_factor": 0.25}, ""),
        (256, 1e6, 1.0, 2048, {"partial_rotary_factor": 0.25}, "Gemma-sized head"),
        (
            96,
            500000.0,
            2.0,
            2048,
            {"partial_rotary_factor": 0.3},
            "p * d // 2 not an integer: 14 of 48 rotated",
        ),
        (
            100,
            10000.0,
            2.0,
            2048,
            {"partial_rotary_factor": 0.58},
            "0.58 * 100 < 58 in float64: 28 rotated, not 29",
        ),
        (16, 10000.0, 2.0, 2048, {"partial_rotary_factor": 0.1}, "none rotated"),
    ),
}

"""Reference vectors for other engines (`rope-lab reference-vectors --out DIR`).

For every registered RoPE scaling method (`rope_lab.registry.SCALINGS`) and a grid of
parameters that includes the edge cases engines get wrong, DIR receives Parquet tables of the
inverse frequencies, the attention factors, cos/sin at chosen positions (large ones included,
where float32 rounding of position x frequency differs between engines), and the logits of a
tiny deterministic Llama-shaped rope_lab Transformer under each method, whose weights are
saved as a Hugging Face checkpoint (`DIR/model`). `DIR/README.md` describes every file and
column; `DIR/manifest.json` holds the rope_lab version, the parameters and each file's rows
and SHA-256.

The grid is built from the registry and the methods' capabilities, never from a list of names:
every method gets the base configurations; a length-dependent method also a sweep of seq_len
below, at and above the training length; a method whose dataclass has a field (`beta_fast`,
`mscale`, `attention_factor`, `low_freq_factor`, `partial_rotary_factor`, ...) the edge cases
of that field (`FIELD_CASES`); a required field without a default takes `REQUIRED_EXAMPLES`'s
value (a new method with a new required field fails naming it).

A table is one function registered with `@table(name, description, columns)` that takes the
`Vectors` and returns a polars DataFrame; `write` and the README pick it up. `PLANNED` names
tables not written yet (a position-remap table, once remap methods exist); the README lists
them as not yet present until a table of that name is registered.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from rope_lab.runtime.atomic import fsync_dir

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


def _seq_lens(length: int, factor: float) -> tuple[int | None, ...]:
    """seq_len of a length-dependent method: unset, below, at, just above and beyond L."""
    beyond = max(1, round(factor * length))
    lens = (None, length // 2, length - 1, length, length + 1, 2 * length, int(3.7 * length))
    return tuple(dict.fromkeys((*lens, beyond, 4 * beyond)))


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


@dataclass(frozen=True)
class Case:
    """One set of arguments of `rope_lab.model.rope.inv_freq` (and its HF form)."""

    case_id: str
    group: str  # "grid" or "model" (the tiny model's scaling at one length)
    method: str
    rotary_dim: int
    head_dim: int
    theta: float
    factor: float
    original_length: int
    seq_len: int | None
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def frequencies(self) -> tuple[np.ndarray, float]:
        """(rotary_dim // 2,) float32 inverse frequencies and the attention factor."""
        from rope_lab.model.rope import inv_freq

        return inv_freq(
            self.method,
            self.rotary_dim,
            theta=self.theta,
            factor=self.factor,
            original_length=self.original_length,
            seq_len=self.seq_len,
            **self.params,
        )

    def hf(self) -> tuple[dict[str, Any] | None, str]:
        """(the Hugging Face config fields that reproduce the case, or None; why not)."""
        from rope_lab.hf.config import CheckpointError, hf_rope_parameters

        proportional = "partial_rotary_factor" in self.params
        try:
            rope, max_pos = hf_rope_parameters(
                self.method,
                theta=self.theta,
                factor=self.factor,
                train_length=self.original_length,
                params=self.params,
                partial_rotary_factor=1.0 if proportional else self.rotary_dim / self.head_dim,
            )
        except CheckpointError as err:
            return None, str(err)
        return {
            "head_dim": self.head_dim,
            "max_position_embeddings": max_pos,
            "rope_parameters": rope,
        }, ""

    def record(self) -> dict[str, Any]:
        """The case as plain JSON values."""
        out = dataclasses.asdict(self)
        out["params"] = _plain(self.params)
        return out


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively (for JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _fields(method: str) -> list[dataclasses.Field]:
    from rope_lab.registry import SCALINGS

    return list(dataclasses.fields(SCALINGS[method]))


def _required(method: str, rotary_dim: int, factor: float) -> dict[str, Any]:
    """Example values of the method's required fields (`REQUIRED_EXAMPLES`)."""
    out = {}
    for f in _fields(method):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if f.name not in REQUIRED_EXAMPLES:
                raise ValueError(
                    f"scaling {method!r}: required field {f.name!r} has no example value; add "
                    "one to rope_lab.reference_vectors.REQUIRED_EXAMPLES"
                )
            out[f.name] = REQUIRED_EXAMPLES[f.name](rotary_dim, factor)
    return out


def _methods(methods: tuple[str, ...] | None) -> tuple[str, ...]:
    """`methods` checked against the registry (ValueError names an unknown one); None: all."""
    from rope_lab.registry import SCALINGS

    if methods is None:
        return SCALINGS.names()
    for name in methods:
        if name not in SCALINGS:
            raise ValueError(SCALINGS.unknown(name))
    return tuple(methods)


def grid_cases(methods: tuple[str, ...] | None = None) -> list[Case]:
    """The parameter grid of every registered scaling method, or of `methods` (see the module
    docstring)."""
    from rope_lab.registry import SCALINGS

    out: list[Case] = []
    for method in _methods(methods):
        cls = SCALINGS[method]
        names = {f.name for f in _fields(method)}
        rows: list[tuple[int, int, float, float, int, int | None, dict[str, Any], str]] = []
        for d, theta, factor, length, note in BASE:
            seqs = _seq_lens(length, factor) if cls.length_dependent else (None,)
            for seq in seqs:
                rows.append((d, d, theta, factor, length, seq, {}, note))
        if "partial_rotary_factor" not in names:
            for head, d in PARTIAL:
                note = f"partial rotary {d}/{head}"
                seq = 2 * 2048 if cls.length_dependent else None
                rows.append((head, d, 10000.0, 4.0, 2048, seq, {}, note))
        for name, edge in FIELD_CASES.items():
            if name not in names:
                continue
            for d, theta, factor, length, params, note in edge:
                if not set(params) <= names:
                    continue
                seq = 2 * length if cls.length_dependent else None
                rows.append((d, d, theta, factor, length, seq, params, f"{name}: {note}"))
        seen: set[str] = set()
        for head, d, theta, factor, length, seq, params, note in rows:
            full = {**_required(method, d, factor), **params}
            key = json.dumps([head, d, theta, factor, length, seq, _plain(full)], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            case_id = f"{method}-{len(seen) - 1:03d}"
            out.append(
                Case(case_id, "grid", method, d, head, theta, factor, length, seq, full, note)
            )
    return out


def model_cases(methods: tuple[str, ...] | None = None) -> list[Case]:
    """The tiny model's scaling per method (all, or `methods`): one case (seq_len None) for a
    method that does not depend on the length, one per `LOGIT_LENGTHS` entry for one that
    does."""
    from rope_lab.registry import SCALINGS

    d = MODEL["head_dim"]
    out = []
    for method in _methods(methods):
        params = _required(method, d, MODEL_FACTOR)
        if "partial_rotary_factor" in {f.name for f in _fields(method)}:
            params["partial_rotary_factor"] = 0.5
        lengths: tuple[int | None, ...] = (
            LOGIT_LENGTHS if SCALINGS[method].length_dependent else (None,)
        )
        for seq in lengths:
            suffix = "" if seq is None else f"-L{seq}"
            out.append(
                Case(f"model-{method}{suffix}", "model", method, d, d, MODEL_THETA,
                     MODEL_FACTOR, TRAIN_LENGTH, seq, params,
                     "the tiny model's scaling" + (f" at seq_len {seq}" if seq else ""))
            )  # fmt: skip
    return out


class Vectors:
    """What the tables are built from: the cases (of every method, or of `methods`), their
    frequencies, the tiny model and its input tokens."""

    def __init__(self, methods: tuple[str, ...] | None = None) -> None:
        self.methods = _methods(methods)
        self.cases: list[Case] = grid_cases(self.methods) + model_cases(self.methods)
        self._freqs: dict[str, tuple[np.ndarray, float]] = {}

    def frequencies(self, case: Case) -> tuple[np.ndarray, float]:
        """The case's (d/2,) float32 frequencies and attention factor (computed once)."""
        if case.case_id not in self._freqs:
            self._freqs[case.case_id] = case.frequencies()
        return self._freqs[case.case_id]

    @cached_property
    def model(self) -> Any:
        """The tiny Transformer: every trainable weight drawn N(0, 0.4^2) by NumPy's generator
        of seed `SEED` in the order of the model's leaves (+1 for the 1-D norm weights), so its
        logits are O(1) and differ between scalings."""
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        from rope_lab.config import ModelConfig, PositionConfig
        from rope_lab.model.positions.rotary import RopeConfig
        from rope_lab.model.transformer import Transformer

        cfg = ModelConfig(
            **MODEL, position=PositionConfig(kind="rope", options=RopeConfig(theta=MODEL_THETA))
        )
        skeleton = eqx.filter_eval_shape(
            lambda: Transformer(
                cfg, VOCAB, train_length=TRAIN_LENGTH, max_length=1, key=jax.random.PRNGKey(0)
            )
        )
        model = eqx.tree_at(
            lambda m: m.position,
            skeleton,
            cfg.position.options.build(cfg, max_length=1, train_length=TRAIN_LENGTH, key=None),
        )
        rng = np.random.default_rng(SEED)  # NumPy draws: the same weights on every platform

        def draw(x: jax.ShapeDtypeStruct) -> jax.Array:
            normal = 0.4 * rng.standard_normal(x.shape) + (len(x.shape) == 1)
            return jnp.asarray(normal, jnp.float32)

        is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)
        return jax.tree.map(lambda x: draw(x) if is_shape(x) else x, model, is_leaf=is_shape)

    @cached_property
    def tokens(self) -> np.ndarray:
        """(max LOGIT_LENGTHS,) int32 tokens; a forward of length L reads the first L."""
        rng = np.random.default_rng(SEED)
        return rng.integers(0, VOCAB, max(LOGIT_LENGTHS)).astype(np.int32)


def logits_under(model: Any, case: Case, tokens: np.ndarray) -> np.ndarray:
    """(L, V) float32 logits of `model` on tokens (L,) under the case's scaling, taken at
    seq_len = L where the method depends on the length."""
    import jax.numpy as jnp

    from rope_lab.model.transformer import with_scaling

    seq = case.seq_len if case.seq_len is not None else len(tokens)
    scaled = with_scaling(model, case.method, case.factor, dict(case.params), seq_len=seq)
    return np.asarray(_forward(scaled, jnp.asarray(tokens)), dtype=np.float32)


def _forward(model: Any, tokens: Any) -> Any:
    """model(tokens), compiled once per shape (the scalings only swap frequency buffers)."""
    import equinox as eqx

    global _FORWARD
    if _FORWARD is None:

        def call(m: Any, t: Any) -> Any:
            return m(t)

        _FORWARD = eqx.filter_jit(call)
    return _FORWARD(model, tokens)


_FORWARD: Any = None


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """One Parquet file: `build(vectors)` returns its rows with exactly `columns`."""

    name: str
    description: str
    columns: dict[str, str]
    build: Callable[[Vectors], pl.DataFrame]

    @property
    def file(self) -> str:
        return f"{self.name}.parquet"


TABLES: dict[str, Table] = {}
# tables someone will add, named in the README as not yet present until registered
PLANNED: dict[str, str] = {}


def table(
    name: str, description: str, columns: dict[str, str]
) -> Callable[[Callable[[Vectors], pl.DataFrame]], Callable[[Vectors], pl.DataFrame]]:
    """Register a table builder `f(vectors) -> DataFrame` as `name.parquet`."""

    def add(build: Callable[[Vectors], pl.DataFrame]) -> Callable[[Vectors], pl.DataFrame]:
        if name in TABLES:
            raise ValueError(f"reference table {name!r} is registered twice")
        TABLES[name] = Table(name, description, columns, build)
        return build

    return add


@table(
    "cases",
    "One row per case: the arguments of rope_lab's inv_freq, the attention factor it gives, "
    "and the Hugging Face config fields that reproduce it.",
    {
        "case_id": "string; the key of every other table (`METHOD-NNN` for the grid, "
        "`model-METHOD[-LSEQ]` for the tiny model's scaling)",
        "group": "string; `grid` (the parameter grid) or `model` (the scaling under which "
        "logits.parquet ran the tiny model)",
        "method": "string; rope_lab's scaling method (rope_lab.registry.SCALINGS)",
        "rotary_dim": "int64; rotated dims d of a head (d/2 frequencies)",
        "head_dim": "int64; the head's dims (> rotary_dim: partial rotary; HF's "
        "partial_rotary_factor = rotary_dim / head_dim)",
        "theta": "float64; the RoPE base (HF rope_theta)",
        "factor": "float64; the scaling factor s",
        "original_length": "int64; the training length L (HF: original_max_position_embeddings "
        "for yarn / llama3 / longrope, max_position_embeddings for dynamic; unused by methods "
        "that do not read it)",
        "seq_len": "int64, null when unset; the current length for a length-dependent method "
        "(HF: max position id + 1)",
        "params": "string, JSON; the method's own parameters as set (unset ones take the "
        "method's defaults)",
        "attention_factor": "float64; the factor cos and sin are multiplied by "
        "(HF attention_scaling)",
        "hf_config": "string, JSON, null where HF has no form: {head_dim, "
        "max_position_embeddings, rope_parameters} of a transformers 5.x config that gives "
        "the same frequencies and attention factor",
        "not_in_hf": "string; why HF has no form of the method (empty when it has one)",
        "note": "string; what the case tests",
    },
)
def _cases(v: Vectors) -> pl.DataFrame:
    rows = []
    for c in v.cases:
        hf, why = c.hf()
        rows.append(
            {
                "case_id": c.case_id,
                "group": c.group,
                "method": c.method,
                "rotary_dim": c.rotary_dim,
                "head_dim": c.head_dim,
                "theta": c.theta,
                "factor": c.factor,
                "original_length": c.original_length,
                "seq_len": c.seq_len,
                "params": json.dumps(_plain(c.params), sort_keys=True),
                "attention_factor": v.frequencies(c)[1],
                "hf_config": None if hf is None else json.dumps(hf, sort_keys=True),
                "not_in_hf": why,
                "note": c.note,
            }
        )
    schema = {
        "case_id": pl.String, "group": pl.String, "method": pl.String, "rotary_dim": pl.Int64,
        "head_dim": pl.Int64, "theta": pl.Float64, "factor": pl.Float64,
        "original_length": pl.Int64, "seq_len": pl.Int64, "params": pl.String,
        "attention_factor": pl.Float64, "hf_config": pl.String, "not_in_hf": pl.String,
        "note": pl.String,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


@table(
    "inv_freq",
    "The inverse frequencies of every case, one row per frequency.",
    {
        "case_id": "string; cases.parquet's key",
        "index": "int64; i in 0 .. rotary_dim/2 - 1 (dims i and i + rotary_dim/2 form a pair, "
        "HF's half-split layout)",
        "exponent": "float32; 2i / d formed in float32 (HF's torch.arange(0, d, 2).float() / d), "
        "the base's exponent of the unscaled frequency theta ** -(2i/d)",
        "inv_freq": "float32; the frequency in radians per position (0 where a method rotates "
        "nothing: proportional's unrotated pairs)",
    },
)
def _inv_freq(v: Vectors) -> pl.DataFrame:
    ids, index, exponent, inv = [], [], [], []
    for c in v.cases:
        freq = v.frequencies(c)[0]
        half = len(freq)
        ids += [c.case_id] * half
        index.append(np.arange(half))
        exponent.append(np.arange(0, c.rotary_dim, 2, dtype=np.float32) / np.float32(c.rotary_dim))
        inv.append(freq)
    return pl.DataFrame(
        {
            "case_id": ids,
            "index": np.concatenate(index).astype(np.int64),
            "exponent": np.concatenate(exponent).astype(np.float32),
            "inv_freq": np.concatenate(inv).astype(np.float32),
        }
    )


def case_positions(case: Case) -> tuple[int, ...]:
    """`POSITIONS` plus the case's L - 1, L and s x L - 1 (sorted, distinct)."""
    beyond = max(1, round(case.factor * case.original_length))
    extra = (case.original_length - 1, case.original_length, beyond - 1)
    return tuple(sorted(set(POSITIONS) | {p for p in extra if p >= 0}))


@table(
    "cos_sin",
    "cos and sin at chosen positions (POSITIONS in manifest.json, plus each case's L - 1, L "
    "and s x L - 1), one row per (case, position, frequency). Convention (HF's and rope_lab's): "
    "the angle is float32(position) x inv_freq rounded once to float32 (a float32 multiply; "
    "a position above 2^24 is itself rounded to float32 first, as HF's position_ids.float()); "
    "cos and sin are of that float32 angle, here correctly rounded from float64 (torch's "
    "float32 cos / sin may differ by 1 ulp). They are NOT multiplied by the attention factor: "
    "HF's cos / sin tensors are these times cases.attention_factor (in float32). The _exact "
    "columns are of the exact product, the gap a float32 engine cannot avoid.",
    {
        "case_id": "string; cases.parquet's key",
        "position": "int64; the token position",
        "index": "int64; the frequency index i (dims i and i + rotary_dim/2)",
        "angle": "float32; float32(position) * inv_freq, a float32 multiply",
        "cos": "float32; cos(angle)",
        "sin": "float32; sin(angle)",
        "angle_exact": "float64; position * inv_freq, exact (the integer position times the "
        "float32 frequency)",
        "cos_exact": "float64; cos(angle_exact)",
        "sin_exact": "float64; sin(angle_exact)",
    },
)
def _cos_sin(v: Vectors) -> pl.DataFrame:
    parts = []
    for c in v.cases:
        if c.group == "model" and c.seq_len is not None and c.seq_len != max(LOGIT_LENGTHS):
            continue  # one length of a length-dependent model scaling is enough here
        inv = v.frequencies(c)[0]
        pos = np.asarray(case_positions(c), dtype=np.int64)
        angle = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float32)
        exact = pos.astype(np.float64)[:, None] * inv.astype(np.float64)[None, :]
        a64 = angle.astype(np.float64)
        n, half = angle.shape
        parts.append(
            pl.DataFrame(
                {
                    "case_id": [c.case_id] * (n * half),
                    "position": np.repeat(pos, half),
                    "index": np.tile(np.arange(half, dtype=np.int64), n),
                    "angle": angle.ravel(),
                    "cos": np.cos(a64).astype(np.float32).ravel(),
                    "sin": np.sin(a64).astype(np.float32).ravel(),
                    "angle_exact": exact.ravel(),
                    "cos_exact": np.cos(exact).ravel(),
                    "sin_exact": np.sin(exact).ravel(),
                }
            )
        )
    return pl.concat(parts)


@table(
    "logits",
    "The tiny model's logits (DIR/model: a Llama checkpoint, rope_theta 10000, training "
    "length 32) under each method's `model` case, one row per (case, forward length, "
    "position). A forward of length L reads the first L tokens of the same sequence at "
    "positions 0 .. L-1; a length-dependent method is taken at seq_len = L (its case has that "
    "seq_len). Reproduce with DIR/model/config.json's rope_parameters replaced by the case's "
    "hf_config (where HF has the method).",
    {
        "case_id": "string; cases.parquet's key (group `model`)",
        "method": "string; the scaling method",
        "length": "int64; the forward's length L",
        "position": "int64; the position 0 .. L-1",
        "token": "int64; the input token at that position",
        "logits": "list[float32] of vocab size (64); the model's output at that position",
    },
)
def _logits(v: Vectors) -> pl.DataFrame:
    parts = []
    for c in v.cases:
        if c.group != "model":
            continue
        lengths = LOGIT_LENGTHS if c.seq_len is None else (c.seq_len,)
        for length in lengths:
            tokens = v.tokens[:length]
            out = logits_under(v.model, c, tokens)
            parts.append(
                pl.DataFrame(
                    {
                        "case_id": [c.case_id] * length,
                        "method": [c.method] * length,
                        "length": np.full(length, length, dtype=np.int64),
                        "position": np.arange(length, dtype=np.int64),
                        "token": tokens.astype(np.int64),
                        "logits": out,
                    },
                    schema_overrides={"logits": pl.List(pl.Float32)},
                )
            )
    return pl.concat(parts)


def remap_positions(case: Case) -> tuple[int, ...]:
    """Positions whose pairs `position_remaps` lists: 0, 1, every window / chunk / shift edge
    of the resolved remap (-1, 0, +1), L - 1, L, 2L and 4L - 1, sorted and distinct."""
    sets = remap_rule(case)
    L = case.original_length
    edges = [v for v in dataclasses.asdict(sets).values() if isinstance(v, int) and v > 0]
    if hasattr(sets, "chunk"):
        edges += [sets.chunk, 2 * sets.chunk, 3 * sets.chunk]
    near = {e + d for e in edges for d in (-1, 0, 1)}
    return tuple(sorted(p for p in {0, 1, L - 1, L, 2 * L, 4 * L - 1} | near if p >= 0))


def remap_rule(case: Case) -> Any:
    """The resolved position sets of a remap case (`Remap.rule`)."""
    from rope_lab.model.rope import scaling_config
    from rope_lab.model.scalings.remaps import Remap

    method = scaling_config(case.method, **case.params)
    assert isinstance(method, Remap)
    return method.rule(case.factor, case.original_length)


@table(
    "position_remaps",
    "The relative-position remaps (ReRoPE, Leaky ReRoPE, Self-Extend, Dual Chunk Attention, "
    "STRING): for each remap case and each causal pair of chosen positions (0, 1, L - 1, L, "
    "2L, 4L - 1 and the remap's window / chunk / shift edges +-1), the position set it is "
    "scored in and the positions its query and key are rotated at. The logit of the pair is "
    "RoPE's at relative position query_rotation - key_rotation, with the case's frequencies "
    "(a remap keeps the model's: inv_freq.parquet has direct RoPE's). Rows only for methods "
    "that remap.",
    {
        "case_id": "string; cases.parquet's key",
        "method": "string; the remap",
        "resolved": "string, JSON; the remap's parameters with its defaults resolved from "
        "original_length (e.g. ReRoPE's window L / 2)",
        "query_position": "int64; the query's position i",
        "key_position": "int64; the key's position j <= i",
        "position_set": "int64; the set the pair is scored in (0: exact positions)",
        "query_rotation": "float32; the position the query is rotated at in that set",
        "key_rotation": "float32; the position the key is rotated at in that set",
        "relative": "float64; query_rotation - key_rotation, the relative position the pair "
        "sees (the papers' definition, tests/model/scalings/test_remaps.py)",
    },
)
def _position_remaps(v: Vectors) -> pl.DataFrame:
    from rope_lab.registry import SCALINGS

    parts = []
    for c in v.cases:
        if c.group != "grid" or not SCALINGS[c.method].remaps:
            continue
        sets = remap_rule(c)
        pos = np.asarray(remap_positions(c), dtype=np.int64)
        i, j = np.tril_indices(len(pos))
        chosen = np.asarray(sets.choice(pos, pos))[i, j]
        qs = np.stack(sets.query_positions(pos)).astype(np.float32)
        ks = np.stack(sets.key_positions(pos)).astype(np.float32)
        q_rot, k_rot = qs[chosen, i], ks[chosen, j]
        parts.append(
            pl.DataFrame(
                {
                    "case_id": [c.case_id] * len(i),
                    "method": [c.method] * len(i),
                    "resolved": [json.dumps(dataclasses.asdict(sets), sort_keys=True)] * len(i),
                    "query_position": pos[i],
                    "key_position": pos[j],
                    "position_set": chosen.astype(np.int64),
                    "query_rotation": q_rot,
                    "key_rotation": k_rot,
                    "relative": q_rot.astype(np.float64) - k_rot.astype(np.float64),
                }
            )
        )
    schema = {
        "case_id": pl.String, "method": pl.String, "resolved": pl.String,
        "query_position": pl.Int64, "key_position": pl.Int64, "position_set": pl.Int64,
        "query_rotation": pl.Float32, "key_rotation": pl.Float32, "relative": pl.Float64,
    }  # fmt: skip
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


# ----------------------------------------------------------------------------- writing


def readme(counts: dict[str, int]) -> str:
    """DIR/README.md: every file and column, from `TABLES` (and the planned ones absent)."""
    from rope_lab import __version__

    lines = [
        "# RoPE reference vectors",
        "",
        f"Written by `rope-lab reference-vectors` (rope_lab {__version__}). Every RoPE scaling "
        "method rope_lab registers, over a grid of parameters with the edge cases engines get "
        "wrong (YaRN's mscale / mscale_all_dim / attention_factor, its ramp bounds and their "
        "clamping, original_max_position_embeddings vs max_position_embeddings, partial "
        "rotary dims, dynamic methods below / at / above the trained length, Llama 3's "
        "wavelength bands, LongRoPE's short / long factors, proportional RoPE's rotated "
        "share). Frequencies follow Hugging Face transformers' `modeling_rope_utils` (checked "
        "against transformers 5.24.0) wherever it has the method; `cases.hf_config` says how.",
        "",
        "## Files",
        "",
        "- `manifest.json`: rope_lab's version, the parameters (positions, the tiny model, "
        "every case), and each file's rows, columns and SHA-256.",
        "- `model/`: the tiny model as a Hugging Face checkpoint (`config.json` under the "
        "unscaled `default` rope, `model.safetensors` float32): a `LlamaForCausalLM` with "
        f"{MODEL['depth']} layers, width {MODEL['width']}, {MODEL['heads']} query heads and "
        f"{MODEL['kv_heads']} key/value heads of {MODEL['head_dim']} dims, SwiGLU, RMSNorm "
        f"(eps {MODEL['norm_eps']}), vocabulary {VOCAB}, training length {TRAIN_LENGTH}. "
        "Load it with `transformers` or `rope_lab.from_hf`.",
    ]
    for t in TABLES.values():
        lines.append(f"- `{t.file}` ({counts.get(t.name, 0)} rows): {t.description}")
    for name, what in PLANNED.items():
        if name not in TABLES:
            lines.append(f"- `{name}.parquet`: not yet present: {what}.")
    lines += ["", "## Columns"]
    for t in TABLES.values():
        lines += ["", f"### {t.file}", ""]
        lines += [f"- `{col}`: {what}" for col, what in t.columns.items()]
    lines += [
        "",
        "## Conventions",
        "",
        "- Rotation: HF's half-split layout. For a head x of head_dim dims, the first "
        "rotary_dim dims rotate: x[i] and x[i + d/2] by angle position x inv_freq[i], the rest "
        "pass through; q and k are both rotated, with cos and sin times the attention factor.",
        "- The frequency exponent 2i/d is formed in float32 (inv_freq.exponent); the YaRN ramp "
        "and Llama 3's band arithmetic run in float32 as HF's do; other steps in float64, "
        "rounded to float32 at the end.",
        "- HF's dynamic NTK reads the training length from max_position_embeddings; yarn, "
        "llama3 and longrope from rope_parameters.original_max_position_embeddings (a top-level "
        "original_max_position_embeddings, as Phi-3 writes, takes precedence in transformers). "
        "HF's yarn takes an explicit factor over max_position_embeddings / original (and warns "
        "when they disagree).",
        "- rope_lab takes theta ** -(2i/d) in float64 (from the float32 exponent) and rounds "
        "once; torch's float32 pow differs by 1-2 ulps, which YaRN's ramp and Llama 3's "
        "smoothing amplify by up to ~2 x factor: rope_lab's own test compares these tables "
        "with transformers at a relative tolerance of (4 + 2 x factor) x 2^-23, and with the "
        "golden outputs of transformers 5.24.0 within 3 ulps.",
        "- `ntk_by_parts` is HF's yarn with attention_factor 1.0 (an explicit attention_factor "
        "is taken as is); a method whose cases.hf_config is null (cases.not_in_hf says why, "
        "e.g. static `ntk`, `dynamic_yarn`) is rope_lab's own, its logits rope_lab's forward.",
        "",
        "## Adding a table",
        "",
        "One function in `rope_lab/reference_vectors.py` decorated with `@table(name, "
        "description, columns)`, taking the `Vectors` and returning a polars DataFrame; this "
        "README and the manifest list it from there.",
        "",
    ]
    return "\n".join(lines)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(
    out: str | Path, *, overwrite: bool = False, methods: tuple[str, ...] | None = None
) -> Path:
    """Write every table, the model, README.md and manifest.json into the folder `out`, for
    every registered scaling method or only `methods`.

    The folder is filled under a hidden temporary name beside it and renamed into place, so
    `out` is either absent / as before or complete. FileExistsError when `out` exists and is
    not empty, unless `overwrite` (which replaces it whole).
    """
    from rope_lab import __version__
    from rope_lab.hf.weights import save_hf

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out}: not empty (pass --overwrite to replace it)")
    vectors = Vectors(methods)
    with _staged(out) as tmp:
        counts: dict[str, int] = {}
        files: dict[str, Any] = {}
        for t in TABLES.values():
            frame = t.build(vectors)
            if list(frame.columns) != list(t.columns):
                raise AssertionError(
                    f"table {t.name}: columns {frame.columns} != {list(t.columns)}"
                )
            frame.write_parquet(tmp / t.file, compression="zstd")
            counts[t.name] = frame.height
            files[t.file] = {"rows": frame.height, "columns": list(frame.columns)}
        save_hf(vectors.model, tmp / "model", vocab_size=VOCAB)
        (tmp / "README.md").write_text(readme(counts))
        for name in sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()):
            files.setdefault(name, {})["sha256"] = _sha256(tmp / name)
        manifest = {
            "rope_lab_version": __version__,
            "command": "rope-lab reference-vectors",
            "methods": list(vectors.methods),
            "positions": list(POSITIONS),
            "model": {
                **MODEL,
                "vocab_size": VOCAB,
                "train_length": TRAIN_LENGTH,
                "rope_theta": MODEL_THETA,
                "factor": MODEL_FACTOR,
                "seed": SEED,
                "logit_lengths": list(LOGIT_LENGTHS),
                "tokens": vectors.tokens.tolist(),
            },
            "tables": list(TABLES),
            "absent_tables": [name for name in PLANNED if name not in TABLES],
            "files": files,
            "cases": [c.record() for c in vectors.cases],
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A hidden temporary folder beside `out` to fill; when the block ends without an error it
    replaces `out` (an old `out` is moved aside first, then removed), else it is removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    tmp.mkdir()
    try:
        yield tmp
        for sub in tmp.rglob("*"):
            if sub.is_file():
                with open(sub, "rb") as f:
                    os.fsync(f.fileno())
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old.tmp")
            os.rename(out, old)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

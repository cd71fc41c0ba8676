"""The output folder of `rope-lab reference-vectors --out DIR`: `write` builds every registered
table, saves the tiny model as a Hugging Face checkpoint (`DIR/model`), and writes
`DIR/README.md` (every file and column, from `TABLES`; `readme`) and `DIR/manifest.json` (the
rope_lab version, the parameters and each file's rows and SHA-256). The folder is filled under
a hidden temporary name beside `DIR` and renamed into place, so `DIR` is either as before or
complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rope_lab import __version__
from rope_lab.reference_vectors.parameters import (
    LOGIT_LENGTHS,
    MODEL,
    MODEL_FACTOR,
    MODEL_THETA,
    POSITIONS,
    SEED,
    TRAIN_LENGTH,
    VOCAB,
)
from rope_lab.reference_vectors.tables import PLANNED, TABLES
from rope_lab.reference_vectors.vectors import Vectors
from rope_lab.runtime.atomic import fsync_dir


def readme(counts: dict[str, int]) -> str:
    """DIR/README.md: every file and column, from `TABLES` (and the planned ones absent)."""
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
        "One module in `rope_lab/reference_vectors/`, imported by the package's `__init__`, "
        "with a function decorated with `@table(name, description, columns)` that takes the "
        "`Vectors` and returns a polars DataFrame; this README and the manifest list it from "
        "there.",
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
    from rope_lab.hf.weights import save_hf  # deferred: imports JAX

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

"""Hugging Face safetensors weights <-> a rope_lab `Transformer`.

`from_hf(path)` reads a local checkpoint folder (`config.json`, `*.safetensors`) of the Llama
family (`rope_lab.hf.config.FAMILIES`) into a `Transformer` whose forward equals
`transformers`' (tests/hf): per layer, `input_layernorm`, `self_attn.{q,k,v,o}_proj` (Phi-3's
fused `qkv_proj` split into its query, key and value rows), the q/k/v biases (Qwen2), the
per-head `q_norm` / `k_norm` (Qwen3), `post_attention_layernorm`, `mlp.{gate,up,down}_proj`
(Phi-3's fused `gate_up_proj`: gate rows first), then `model.norm` and `lm_head` (absent when
tied). Cohere 2's q_proj and k_proj rows are reordered per head from interleaved rotary pairs to
rope_lab's half-split ones (`rope_lab.hf.cohere`; a parallel block has no
`post_attention_layernorm`). Layers stack along the leading axis of `Transformer.blocks`.
Stored rotary frequencies (`rotary_emb.inv_freq`, in older checkpoints) are skipped, as
transformers skips them. Weights are read with `safetensors` into the requested dtype;
nothing is downloaded.

`save_hf(model, out, ...)` writes the reverse: a checkpoint `transformers` loads.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from rope_lab.config import ModelConfig
from rope_lab.hf.cohere import COHERE2, half_split_rows, interleaved_rows, is_cohere
from rope_lab.hf.config import CheckpointError, HFArchitecture, hf_config, read_config
from rope_lab.hf.shapes import DERIVED, check_fused, check_tensors
from rope_lab.model.positions import make_position_encoding
from rope_lab.model.transformer import Transformer
from rope_lab.runtime.atomic import atomic_dir
from rope_lab.runtime.checked_files import corrupt, size_note

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# rope_lab block leaf -> HF per-layer tensor name (after Phi-3's fused tensors are split)
_BLOCK_NAMES: dict[tuple[str, ...], str] = {
    ("attn_norm", "weight"): "input_layernorm.weight",
    ("attn", "q", "weight"): "self_attn.q_proj.weight",
    ("attn", "k", "weight"): "self_attn.k_proj.weight",
    ("attn", "v", "weight"): "self_attn.v_proj.weight",
    ("attn", "o", "weight"): "self_attn.o_proj.weight",
    ("attn", "q", "bias"): "self_attn.q_proj.bias",
    ("attn", "k", "bias"): "self_attn.k_proj.bias",
    ("attn", "v", "bias"): "self_attn.v_proj.bias",
    ("attn", "q_norm", "weight"): "self_attn.q_norm.weight",
    ("attn", "k_norm", "weight"): "self_attn.k_norm.weight",
    ("mlp_norm", "weight"): "post_attention_layernorm.weight",
    ("mlp", "gate", "weight"): "mlp.gate_proj.weight",
    ("mlp", "up", "weight"): "mlp.up_proj.weight",
    ("mlp", "down", "weight"): "mlp.down_proj.weight",
}
# OLMo 2's norms sit on the sublayers' outputs (`model.norm_placement: post`)
_POST_NORM_NAMES: dict[tuple[str, ...], str] = {
    ("attn_norm", "weight"): "post_attention_layernorm.weight",
    ("mlp_norm", "weight"): "post_feedforward_layernorm.weight",
}


# Gemma 3's sandwich: a norm before and after each sublayer (`model.norm_placement: sandwich`)
_SANDWICH_NORM_NAMES: dict[tuple[str, ...], str] = {
    ("attn_post_norm", "weight"): "post_attention_layernorm.weight",
    ("mlp_norm", "weight"): "pre_feedforward_layernorm.weight",
    ("mlp_post_norm", "weight"): "post_feedforward_layernorm.weight",
}


def block_names(model: ModelConfig) -> dict[tuple[str, ...], str]:
    """rope_lab block leaf -> HF per-layer tensor name, for the model's norm placement."""
    if model.norm_placement == "post":
        return {**_BLOCK_NAMES, **_POST_NORM_NAMES}
    if model.norm_placement == "sandwich":
        return {**_BLOCK_NAMES, **_SANDWICH_NORM_NAMES}
    return _BLOCK_NAMES


def from_hf(path: str | Path, dtype: str = "float32") -> Transformer:
    """The checkpoint in the local folder `path` as a rope_lab `Transformer` in `dtype`
    (parameters and compute): `model(tokens (*B, L)) -> logits (*B, L, V)`, its trained RoPE
    scaling built at the checkpoint's original context (`model.train_length`)."""
    arch = read_config(path)
    tensors = _read_tensors(Path(path), arch)
    return build(arch, tensors, dtype)


def load_into(model: ModelConfig, path: str | Path) -> Transformer:
    """The checkpoint at `path` as a Transformer whose static config is `model` (a trial's
    `model` section completed from that checkpoint, `rope_lab.hf.trial`), so a model saved by
    a trial loads into `make_model`'s structure."""
    arch = dataclasses.replace(read_config(path), model=model)
    return build(arch, _read_tensors(Path(path), arch), model.dtype)


def build(arch: HFArchitecture, tensors: dict[str, np.ndarray], dtype: str) -> Transformer:
    """A `Transformer` of `arch` holding the named HF tensors (all of them used, each once);
    CheckpointError naming the config key and the tensor where they disagree
    (`rope_lab.hf.shapes.check_tensors`)."""
    if arch.sizes is not None:
        check_tensors(arch, tensors)
    cfg = dataclasses.replace(arch.model, dtype=dtype)
    key = jax.random.PRNGKey(0)
    make = lambda: Transformer(
        cfg, arch.vocab_size, train_length=arch.train_length, max_length=1, key=key
    )
    skeleton = eqx.filter_eval_shape(make)
    encoding = make_position_encoding(cfg, max_length=1, train_length=arch.train_length, key=key)
    layers = tuple(
        None
        if layer.position is None
        else make_position_encoding(
            cfg.with_position(layer.position), max_length=1, train_length=arch.train_length, key=key
        )
        for layer in cfg.layers
    )
    model = eqx.tree_at(lambda m: (m.position, m.layer_positions), skeleton, (encoding, layers))
    used: set[str] = set()
    as_array = lambda name: _take(tensors, name, used, DTYPES[dtype])
    model = eqx.tree_at(lambda m: m.embedding, model, as_array("model.embed_tokens.weight"))
    model = eqx.tree_at(lambda m: m.final_norm.weight, model, as_array("model.norm.weight"))
    if model.head is not None:
        model = eqx.tree_at(lambda m: m.head.weight, model, as_array("lm_head.weight"))
    for path, name in block_names(cfg).items():
        if _get(model.blocks, path) is None:
            continue
        stacked = jnp.stack([as_array(f"model.layers.{i}.{name}") for i in range(cfg.depth)])
        model = eqx.tree_at(_getter(path), model, stacked)
    left = sorted(  # a tied checkpoint may store its head
        name for name in set(tensors) - used - {"lm_head.weight"} if not DERIVED.search(name)
    )
    if left:
        raise CheckpointError(f"tensors rope_lab does not use: {', '.join(left[:8])}")
    missing = [
        jax.tree_util.keystr(p)
        for p, x in jax.tree_util.tree_leaves_with_path(model)
        if isinstance(x, jax.ShapeDtypeStruct)
    ]
    assert not missing, missing
    return model


def _getter(path: tuple[str, ...]) -> Any:
    """`tree_at`'s `where` for the block leaf at `path`."""
    return lambda m: _get(m.blocks, path)


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        tree = getattr(tree, part)
        if tree is None:
            return None
    return tree


def _take(tensors: dict[str, np.ndarray], name: str, used: set[str], dtype) -> jax.Array:
    if name not in tensors:
        raise CheckpointError(f"the checkpoint has no tensor {name!r}")
    used.add(name)
    return jnp.asarray(tensors[name], dtype=dtype)


def _read_tensors(folder: Path, arch: HFArchitecture) -> dict[str, np.ndarray]:
    """Every tensor of the folder's `*.safetensors` files, as float32 NumPy arrays, with
    Phi-3's fused projections split into the Llama names; CorruptFile naming a file that
    safetensors cannot read."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors files (other formats are not read)")
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="flax") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    tensors[name] = np.asarray(f.get_tensor(name), dtype=np.float32)
        except Exception as err:
            what = f"is not a readable safetensors file (truncated? {size_note(file)})"
            hint = "download or export the checkpoint again"
            raise corrupt(file, what, err, hint=hint) from None
    if arch.model_type == "phi3":
        _split_phi3(tensors, arch)
    if arch.model_type == COHERE2:
        _reorder_rotary_rows(tensors, arch.model, half_split_rows)
    return tensors


def _reorder_rotary_rows(tensors: dict[str, np.ndarray], model: ModelConfig, order) -> None:
    """Each layer's q_proj and k_proj weight rows (heads x head_dim, width) in the row `order`
    of (heads, head_dim) (`half_split_rows` or `interleaved_rows`), in place; a tensor of
    another shape is left for `check_tensors` to name."""
    for i in range(model.depth):
        for name, heads in (("q", model.n_heads), ("k", model.n_kv_heads)):
            key = f"model.layers.{i}.self_attn.{name}_proj.weight"
            if key in tensors and tensors[key].shape[0] == heads * model.d_head:
                tensors[key] = tensors[key][order(heads, model.d_head)]


def _split_phi3(tensors: dict[str, np.ndarray], arch: HFArchitecture) -> None:
    """qkv_proj -> q/k/v_proj (rows: heads, kv heads, kv heads x head_dim) and gate_up_proj
    -> gate_proj, up_proj (the first half is the gate), in place."""
    if arch.sizes is not None:
        check_fused(arch, {name: tuple(t.shape) for name, t in tensors.items()})
    m = arch.model
    q, kv = m.attention_width, m.n_kv_heads * m.d_head
    for i in range(m.depth):
        pre = f"model.layers.{i}."
        qkv = tensors.pop(pre + "self_attn.qkv_proj.weight")
        for name, rows in zip("qkv", np.split(qkv, [q, q + kv]), strict=True):
            tensors[pre + f"self_attn.{name}_proj.weight"] = rows
        gate, up = np.split(tensors.pop(pre + "mlp.gate_up_proj.weight"), 2)
        tensors[pre + "mlp.gate_proj.weight"], tensors[pre + "mlp.up_proj.weight"] = gate, up


def hf_tensors(model: Transformer) -> dict[str, np.ndarray]:
    """The model's weights under Hugging Face Llama-family names, float32 (L, ...) per layer."""
    arrays = lambda x: np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    out = {
        "model.embed_tokens.weight": arrays(model.embedding),
        "model.norm.weight": arrays(model.final_norm.weight),
    }
    if model.head is not None:
        out["lm_head.weight"] = arrays(model.head.weight)
    for path, name in block_names(model.config).items():
        stacked = _get(model.blocks, path)
        if stacked is None:
            continue
        for i in range(model.config.depth):
            out[f"model.layers.{i}.{name}"] = arrays(stacked[i])
    if is_cohere(model.config):
        _reorder_rotary_rows(out, model.config, interleaved_rows)
    return out


def save_hf(
    model: Transformer, out: str | Path, *, vocab_size: int, tokenizer: Path | None = None
) -> Path:
    """Write `model` as a Hugging Face checkpoint folder `out` (config.json,
    model.safetensors, tokenizer.json when given), atomically; CheckpointError naming a field
    Hugging Face cannot express (`hf_config`)."""
    config = hf_config(model.config, vocab_size, model.train_length)
    out = Path(out)
    if out.exists():
        raise CheckpointError(f"{out}: exists; export writes a new folder")
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(hf_tensors(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if tokenizer is not None:
            shutil.copyfile(tokenizer, tmp / "tokenizer.json")
    return out

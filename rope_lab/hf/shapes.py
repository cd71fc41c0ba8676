"""A checkpoint's tensors against its config.json: every tensor the config implies is there, of
the shape it implies, and no other (`check_tensors`). A disagreement is refused naming the
config file, the key(s) the expected size comes from with their values, and the tensor's name
and shape, e.g. `.../config.json: hidden_size 48 disagrees with model.embed_tokens.weight of
shape (96, 32)`; a size made of several keys names them all (`num_key_value_heads 2 x head_dim 8
= 16`), so a single wrong key is always among those named. Without this, a config that
disagrees with its tensors loaded and computed with the tensors (or failed at the first
forward). NumPy and safetensors' headers only: no JAX, so validating a trial from a
checkpoint checks it too (`check_checkpoint`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from safetensors import SafetensorError, safe_open

from rope_lab.hf.fields import CheckpointError

if TYPE_CHECKING:
    from rope_lab.hf.config import HFArchitecture

_LAYER = re.compile(r"model\.layers\.(\d+)\.")
# tensors transformers skips on load too: the rotary frequencies older checkpoints stored, which
# the config decides
DERIVED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


@dataclass(frozen=True)
class Sizes:
    """Each tensor dimension's size with the config keys it comes from (as text)."""

    vocab: tuple[int, str]
    width: tuple[int, str]
    mlp: tuple[int, str]
    head: tuple[int, str]
    queries: tuple[int, str]  # heads x head_dim
    keys: tuple[int, str]  # kv heads x head_dim


def sizes_of(
    *, vocab: int, width: int, mlp: int, heads: int, kv: int | None, head_dim: int | None
) -> Sizes:
    """The `Sizes` of a config; `kv`, `head_dim`: None where config.json does not set them."""
    d = head_dim or width // heads
    head = (
        f"head_dim {d}"
        if head_dim
        else f"head_dim {d} (hidden_size {width} / num_attention_heads {heads})"
    )
    g = kv or heads
    kv_text = f"num_key_value_heads {g}" if kv else f"num_key_value_heads {g} (num_attention_heads)"
    return Sizes(
        vocab=(vocab, f"vocab_size {vocab}"),
        width=(width, f"hidden_size {width}"),
        mlp=(mlp, f"intermediate_size {mlp}"),
        head=(d, head),
        queries=(heads * d, f"num_attention_heads {heads} x {head} = {heads * d}"),
        keys=(g * d, f"{kv_text} x {head} = {g * d}"),
    )


def expected_tensors(arch: HFArchitecture) -> dict[str, tuple[tuple[tuple[int, str], ...], str]]:
    """Tensor name -> (its dimensions as `Sizes` entries, why the config implies it), in the
    order they are checked."""
    assert arch.sizes is not None
    s, m, kind = arch.sizes, arch.model, arch.model_type
    out = {
        "model.embed_tokens.weight": ((s.vocab, s.width), ""),
        "model.norm.weight": ((s.width,), ""),
    }
    if not m.tie_embeddings:
        out["lm_head.weight"] = ((s.vocab, s.width), "tie_word_embeddings is false")
    # the norms read by attention and by the MLP (OLMo 2: on the sublayers' outputs) and the
    # sandwich's output norms (Gemma 3)
    attn_norm, mlp_norm = {
        "pre": ("input_layernorm", "post_attention_layernorm"),
        "post": ("post_attention_layernorm", "post_feedforward_layernorm"),
        "sandwich": ("input_layernorm", "pre_feedforward_layernorm"),
    }[m.norm_placement]
    sandwich = m.norm_placement == "sandwich"
    per_layer = {
        f"{attn_norm}.weight": ((s.width,), ""),
        "self_attn.q_proj.weight": ((s.queries, s.width), ""),
        "self_attn.k_proj.weight": ((s.keys, s.width), ""),
        "self_attn.v_proj.weight": ((s.keys, s.width), ""),
        "self_attn.o_proj.weight": ((s.width, s.queries), ""),
    }
    if m.qkv_bias:
        why = f"model_type {kind!r} has q/k/v biases"
        for name, size in (("q", s.queries), ("k", s.keys), ("v", s.keys)):
            per_layer[f"self_attn.{name}_proj.bias"] = ((size,), why)
    if m.qk_norm:
        whole = m.qk_norm_scope == "projection"
        for name, size in (("q_norm", s.queries), ("k_norm", s.keys)):
            per_layer[f"self_attn.{name}.weight"] = (
                (size if whole else s.head,),
                f"model_type {kind!r} has QK-norm",
            )
    if sandwich:
        per_layer["post_attention_layernorm.weight"] = ((s.width,), "")
    per_layer.update({
        f"{mlp_norm}.weight": ((s.width,), ""),
        "mlp.gate_proj.weight": ((s.mlp, s.width), ""),
        "mlp.up_proj.weight": ((s.mlp, s.width), ""),
        "mlp.down_proj.weight": ((s.width, s.mlp), ""),
    })  # fmt: skip
    if sandwich:
        per_layer["post_feedforward_layernorm.weight"] = ((s.width,), "")
    if m.block == "parallel":  # one norm before both sublayers
        del per_layer[f"{mlp_norm}.weight"]
    for i in range(m.depth):
        out.update({f"model.layers.{i}.{name}": spec for name, spec in per_layer.items()})
    return out


def checkpoint_shapes(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """Each tensor's shape from the headers of the folder's `*.safetensors` (no data read);
    None when there are none or one cannot be read (loading the weights names why)."""
    files = sorted(folder.glob("*.safetensors"))
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        for file in files:
            with safe_open(str(file), framework="numpy") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    shapes[name] = tuple(f.get_slice(name).get_shape())
    except (OSError, SafetensorError):
        return None
    return shapes if files else None


def check_checkpoint(arch: HFArchitecture, folder: Path) -> None:
    """`check_shapes` on the shapes the folder's safetensors headers give (Phi-3's fused
    projections checked, then split), so a trial validated from a checkpoint is refused
    before anything runs; nothing when the headers cannot be read."""
    shapes = checkpoint_shapes(folder)
    if shapes is None:
        return
    if arch.model_type == "phi3":
        check_fused(arch, shapes)
        shapes = split_fused(arch, shapes)
    check_shapes(arch, shapes)


def check_tensors(arch: HFArchitecture, tensors: dict[str, np.ndarray]) -> None:
    """`check_shapes` of the tensors (Llama names), then a stored head of a tied checkpoint
    must be the embedding."""
    check_shapes(arch, {name: tuple(t.shape) for name, t in tensors.items()})
    head = tensors.get("lm_head.weight")
    stored = arch.model.tie_embeddings and head is not None
    if stored and not np.array_equal(
        tensors["lm_head.weight"], tensors["model.embed_tokens.weight"]
    ):
        raise CheckpointError(
            f"{arch.where}: tie_word_embeddings true, but lm_head.weight is not "
            "model.embed_tokens.weight"
        )


def check_shapes(arch: HFArchitecture, shapes: dict[str, tuple[int, ...]]) -> None:
    """CheckpointError naming the config key and the tensor where the tensor shapes (Llama
    names) and `arch` disagree: the layers held, a missing tensor, a shape, a tensor with no
    place (stored rotary frequencies aside, `DERIVED`), a stored head of a tied checkpoint not
    shaped as the embedding."""
    check_layers(arch, shapes)
    expected = expected_tensors(arch)
    folder = Path(arch.where).parent
    for name, (dims, why) in expected.items():
        if name not in shapes:
            because = f" ({why})" if why else ""
            raise CheckpointError(f"{folder}: no tensor {name} in its *.safetensors{because}")
        _check_shape(arch.where, name, shapes[name], dims)
    unplaced = set(shapes) - set(expected) - {"lm_head.weight"}
    extra = sorted(name for name in unplaced if not DERIVED.search(name))
    if extra:
        hint = _extra_hint(arch, extra)
        raise CheckpointError(
            f"{folder}: tensors the config has no place for: {', '.join(extra[:8])}{hint}"
        )
    head = shapes.get("lm_head.weight")
    if arch.model.tie_embeddings and head is not None:
        embedding = shapes["model.embed_tokens.weight"]
        if head != embedding:
            raise CheckpointError(
                f"{arch.where}: tie_word_embeddings true, but lm_head.weight of shape {head} is "
                f"not model.embed_tokens.weight of shape {embedding}"
            )


def check_layers(arch: HFArchitecture, names: Iterable[str]) -> None:
    """CheckpointError unless the tensor `names` hold exactly layers 0 .. num_hidden_layers
    - 1."""
    held = sorted({int(m[1]) for name in names if (m := _LAYER.match(name))})
    depth = arch.model.depth
    if held != list(range(depth)):
        contiguous = len(held) > 1 and held == list(range(len(held)))
        span = f"0-{held[-1]}" if contiguous else ", ".join(map(str, held))
        raise CheckpointError(
            f"{arch.where}: num_hidden_layers {depth} disagrees with the tensors, which hold "
            f"layers {span or 'none'} (model.layers.N.*)"
        )


def check_fused(arch: HFArchitecture, shapes: dict[str, tuple[int, ...]]) -> None:
    """Phi-3's fused projections before they are split: qkv_proj (heads + 2 kv heads) x
    head_dim rows, gate_up_proj 2 x intermediate_size rows."""
    check_layers(arch, shapes)
    s = arch.sizes
    assert s is not None
    qkv = (s.queries[0] + 2 * s.keys[0], f"{s.queries[1]} + 2 x ({s.keys[1]})")
    gate_up = (2 * s.mlp[0], f"2 x {s.mlp[1]}")
    for i in range(arch.model.depth):
        fused = (("self_attn.qkv_proj.weight", qkv), ("mlp.gate_up_proj.weight", gate_up))
        for name, rows in fused:
            full = f"model.layers.{i}.{name}"
            if full not in shapes:
                raise CheckpointError(f"{Path(arch.where).parent}: no tensor {full} in its "
                                      "*.safetensors (model_type 'phi3')")  # fmt: skip
            _check_shape(arch.where, full, shapes[full], (rows, s.width))


Shapes = dict[str, tuple[int, ...]]


def split_fused(arch: HFArchitecture, shapes: Shapes) -> Shapes:
    """The shapes after `weights._split_phi3` (of fused shapes `check_fused` passed)."""
    s = arch.sizes
    assert s is not None
    out = dict(shapes)
    for i in range(arch.model.depth):
        pre = f"model.layers.{i}."
        _, width = out.pop(pre + "self_attn.qkv_proj.weight")
        rows = {"q": s.queries[0], "k": s.keys[0], "v": s.keys[0]}
        out.update({pre + f"self_attn.{n}_proj.weight": (r, width) for n, r in rows.items()})
        _, width = out.pop(pre + "mlp.gate_up_proj.weight")
        for n in ("gate", "up"):
            out[pre + f"mlp.{n}_proj.weight"] = (s.mlp[0], width)
    return out


def _check_shape(
    where: str, name: str, shape: tuple[int, ...], dims: tuple[tuple[int, str], ...]
) -> None:
    if len(shape) != len(dims):
        raise CheckpointError(
            f"{where}: {name} has shape {shape}, expected {len(dims)} dimension(s) "
            f"({', '.join(text for _, text in dims)})"
        )
    for got, (size, text) in zip(shape, dims, strict=True):
        if got != size:
            raise CheckpointError(f"{where}: {text} disagrees with {name} of shape {shape}")


def _extra_hint(arch: HFArchitecture, extra: list[str]) -> str:
    if any(n.endswith("_proj.bias") for n in extra) and not arch.model.qkv_bias:
        return f" (model_type {arch.model_type!r} has no q/k/v biases)"
    if any("_norm." in n and "self_attn" in n for n in extra) and not arch.model.qk_norm:
        return f" (model_type {arch.model_type!r} has no QK-norm)"
    return ""

"""Hugging Face's rules for a checkpoint's `rope_parameters` (or older `rope_scaling`), as
transformers 5.24.0 applies them when it reads a config (`modeling_rope_utils.py`,
`RotaryEmbeddingConfigMixin._validate_<rope_type>_rope_parameters`): each rope_type's required
keys, the keys it knows, and the values it calls invalid. Where transformers raises or warns
that a value is invalid, `check_rope_parameters` refuses, naming the file and the key; what it
accepts (a YaRN factor that is not max_position_embeddings / original_max_position_embeddings,
a LongRoPE without a factor) is accepted. `original_max_position_embeddings` is never missing:
transformers fills it in from `max_position_embeddings` (Phi-3: from its own top-level field,
default 4096), and so does `original_length`. One deliberate difference: a boolean is not a
number here (transformers reads `factor: true` as 1)."""

from __future__ import annotations

from rope_lab.hf.fields import CheckpointError, Fields

# keys every rope_type accepts
COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
# rope_type -> (keys a config must give, further keys it may give)
ROPE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (
        ("factor",),
        (
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        ),
    ),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor"),
        ("original_max_position_embeddings",),
    ),
    "longrope": (
        ("short_factor", "long_factor"),
        ("original_max_position_embeddings", "attention_factor", "factor"),
    ),
}
# Phi-3 reads its training length from its own field, whatever rope_parameters says
PHI3_ORIGINAL = 4096


def original_length(cfg: Fields, rope: Fields, kind: str, model_type: str, max_pos: int) -> int:
    """The trained context of a llama3 / yarn / longrope checkpoint as transformers standardizes
    it: Phi-3's top-level `original_max_position_embeddings` (default 4096), else the one in
    the rope parameters, else `max_position_embeddings`; for the other rope_types, the whole
    `max_position_embeddings`."""
    if kind not in ("llama3", "yarn", "longrope"):
        return max_pos
    if model_type == "phi3":
        return int(cfg.integer("original_max_position_embeddings", PHI3_ORIGINAL))
    return int(rope.integer("original_max_position_embeddings", max_pos))


def check_rope_parameters(
    rope: Fields, kind: str, *, max_pos: int, original: int, rotated: tuple[int, str]
) -> None:
    """CheckpointError naming the first key of `rope` (rope_type `kind`) that transformers
    refuses or calls invalid: a required key missing, a key the rope_type does not know, a
    value of the wrong type or out of range. `rotated`: the rotated dims per head and the keys they
    come from."""
    required, optional = ROPE_KEYS[kind]
    for key in required:
        if rope.cfg.get(key) is None:
            raise rope.error(key, f"is missing (rope_type {kind!r} requires it)")
    unknown = sorted(set(rope.cfg) - set(COMMON_KEYS) - set(required) - set(optional))
    if unknown:
        raise CheckpointError(
            f"{rope.file}: {rope.prefix.rstrip('.')}: rope parameter(s) {unknown} of rope_type "
            f"{kind!r} are not supported"
        )
    rope.number("rope_theta", 10000.0, positive=True)
    rope.number("factor", None, minimum=1.0)
    if kind == "yarn":
        _check_yarn(rope)
    elif kind == "llama3":
        low, high = rope.number("low_freq_factor"), rope.number("high_freq_factor")
        if high <= low:
            raise rope.error(
                "high_freq_factor", f"must be greater than low_freq_factor {low:g}, got {high:g}"
            )
        if original >= max_pos:
            raise rope.error(
                "original_max_position_embeddings",
                f"must be less than max_position_embeddings {max_pos}, got {original}",
            )
    elif kind == "longrope":
        for key in ("short_factor", "long_factor"):
            if len(rope.numbers(key)) != rotated[0] // 2:
                raise rope.error(
                    key,
                    f"must have {rotated[0] // 2} entries, half of {rotated[1]} rotated dims; "
                    f"got {len(rope.cfg[key])}",
                )
        rope.number("attention_factor", None, minimum=0.0)


def _check_yarn(rope: Fields) -> None:
    """YaRN's attention factor (a float >= 0: transformers calls an integer one invalid),
    beta_fast >= beta_slow (defaults 32 and 1), mscale's and truncate's types."""
    attention = rope.cfg.get("attention_factor")
    if attention is not None and (not isinstance(attention, float) or attention < 0):
        raise rope.error("attention_factor", f"must be a float >= 0, got {attention!r}")
    fast = rope.number("beta_fast", None)
    slow = rope.number("beta_slow", None)
    if (fast or 32) < (slow or 1):
        raise rope.error("beta_fast", f"must be >= beta_slow {slow or 1:g}, got {fast or 32:g}")
    for key in ("mscale", "mscale_all_dim"):
        rope.number(key, None)
    if rope.cfg.get("truncate") is not None:
        rope.boolean("truncate", True)

"""The model's config section: the family (a registered variant, `model.<family>`), shape,
norms, attention, the position encoding (a registered variant, `model.position.<kind>`) and the
layer layout, with their checks (`check_model`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rope_lab.registry import ATTENTION_FNS, MODELS, POSITIONS
from rope_lab.roles import (
    NOT_IN_CHECKPOINT,
    WRITTEN,
    Label,
    Role,
    Unlabelled,
    execution,
    identity,
    only,
)
from rope_lab.typed import ConfigError, check_choice, check_positive, variant_class, variant_field

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

# layernorm: mean-centred, weight and bias; layernorm_no_bias: weight only (Cohere 2)
NORMS = ("layernorm", "rmsnorm", "layernorm_no_bias")
BLOCKS = ("sequential", "parallel")
# where a block's norms sit: before each sublayer (x + f(norm(x))), on its output (OLMo 2's
# x + norm(f(x))) or both (Gemma 3's sandwich x + norm(f(norm(x))), two norms per sublayer)
NORM_PLACEMENTS = ("pre", "post", "sandwich")
# what QK-norm normalises: each head's queries and keys (Qwen3) or the whole projection, all
# heads at once (OLMo 2)
QK_NORM_SCOPES = ("head", "projection")
# gelu: down(gelu(up x)); swiglu: down(silu(gate x) * up x); geglu: down(gelu(gate x) * up x),
# GELU's tanh approximation (Gemma 3)
MLPS = ("gelu", "swiglu", "geglu")
PARAMETRIZATIONS = ("sp", "ntk", "mup")
DTYPES = ("float32", "bfloat16")
# How attention is computed (`rope_lab.model.attention`); all give the same numbers to rounding.
ATTENTION_IMPLEMENTATIONS = ("auto", "blocked", "reference", "cudnn")
# Family capabilities some model fields need (`roles.Role.needs`, `FamilyConfig.capabilities`):
# attention layers (heads, positions, layout), a readout tied to the embedding, norms whose
# epsilon is set.
ATTENTION = "attention"
TIED_READOUT = "tied readout"
NORM_EPS = "norm epsilon"


@dataclass(frozen=True)
class PositionConfig:
    """How positions enter the model: the encoding `kind` and its own typed config `options`
    (a registered `positions.EncodingConfig`; in YAML and result columns under the kind's name,
    `model.position.<kind>.<field>`).

    `max_length` sizes the learned table (None: the longest evaluated length). With
    `randomized`, training positions are a sorted random subset of [0, random_max_length)
    (Ruoss et al. 2023); evaluation draws them the same way.
    """

    kind: str = identity("rope", label="encoding")
    max_length: int | None = identity(None)
    randomized: bool = identity(False, label=Label(" +randomized"))
    random_max_length: int | None = identity(None)
    options: Any = variant_field(POSITIONS, "kind", role=Role(True, label="encoding"))

    def __post_init__(self) -> None:
        cls = variant_class(POSITIONS, self.kind, "model.position.kind")
        if type(self.options) is not cls:  # None, or left over from another kind by `replace`
            object.__setattr__(self, "options", cls())


@dataclass(frozen=True)
class LayerConfig:
    """One kind of layer in `model.layers`, the repeating pattern of layer kinds.

    `position`: this kind's own encoding (a bias or rotation family: `{kind: none}` for NoPE
    layers, `{kind: rope, rope: {theta: 1.0e6}}` for a per-layer base); None uses
    `model.position`. Absolute encodings add to the input once, so they stay in
    `model.position`. `window`: sliding-window attention over the last `window` keys (None:
    full causal). `attn_scale` > 0: Llama 4's query scaling, query i's logits times
    1 + attn_scale log(1 + floor((p_i + 1) / floor_scale)) at position p_i. `eval_scaling`:
    whether evaluation-time RoPE scaling (PI, YaRN, ...) applies to this kind's RoPE.
    """

    position: PositionConfig | None = identity(None)
    window: int | None = identity(None)
    attn_scale: float = identity(0.0)
    floor_scale: float = identity(8192.0)
    eval_scaling: bool = identity(True)

    def slug(self, model: ModelConfig) -> str:
        """Short name of the kind in trial ids, e.g. 'rope.w16' or 'none'."""
        pos = self.position or model.position
        tag = "" if self.position is None else pos.options.layer_tag()
        parts = [f"{pos.kind}{tag}"]
        if self.window is not None:
            parts.append(f"w{self.window}")
        if self.attn_scale:
            parts.append(f"t{self.attn_scale:g}")
        if not self.eval_scaling:
            parts.append("fixed")
        return ".".join(parts)


@dataclass(frozen=True)
class InitConfig:
    """Where the weights come from: None, a fresh initialisation from `train.seed`; `hf`, a
    local Hugging Face checkpoint folder (`rope_lab.hf`), whose config.json then decides the
    architecture, the vocabulary and the training length (`rope_lab.hf.trial`)."""

    hf: str | None = identity(
        None, label=Unlabelled("a checkpoint's architecture fields label its curves")
    )


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only Transformer shape. Heads default to width // head_dim (fixed head_dim).

    `attention` picks how attention is computed (`rope_lab.model.attention`: auto, blocked,
    reference, cudnn); it changes memory and speed, not results, so trial ids ignore it.
    `layers`: a pattern of layer kinds repeated through the depth (`LayerConfig`; e.g. three
    sliding-window RoPE layers then one full NoPE layer); empty: every layer is `LayerConfig()`.
    `scalable_softmax`: Scalable-Softmax (Nakanishi 2025): each query's logits times
    s_h log(n), n the number of keys it attends, s learned per head and layer (initialised to
    1 / log(L_train), so the last training position starts at temperature 1).
    `attention_fn`: what attention computes (`registry.ATTENTION_FNS`: `softmax`, `sinks`,
    `gated`, `gated_head`, `fox`, `fox_pro`; its
    own fields under its name), as opposed to `attention`, how it is computed.
    `family`: the network (`registry.MODELS`: `transformer`, `cnn`), its own typed fields
    `arch` under its name (`model.cnn.kernel_size`); the fields above it has no use for are
    rejected off their defaults (each field's role declares the family capability it `needs`,
    `rope_lab.roles`; `FamilyConfig.unused_fields`).

    Pretrained-architecture fields (Llama, Mistral, Qwen, Phi-3, OLMo): `heads` and `head_dim`
    both set give attention heads of their own size (heads x head_dim need not equal the width,
    as in Qwen3); `kv_heads`: grouped-query attention, query head h reads key/value head
    h // (heads / kv_heads) (None: one per query head; 1: multi-query); `qkv_bias`: biases on
    the query, key and value projections (Qwen2); `qk_norm`: RMSNorm over each head's
    queries and keys before the rotation (Qwen3); `tie_embeddings`: the readout is the token
    embedding transposed; `norm_eps`: every norm's epsilon; `norm_placement`: `pre` (x +
    f(norm(x))) or `post` (OLMo 2: x + norm(f(x)), the sublayer reading x unnormalised);
    `qk_norm_scope`: `head` (each head's queries and keys) or `projection` (OLMo 2: all query
    heads together, all key heads together, before the split into heads); `sandwich`
    placement: Gemma 3's x + norm(f(norm(x))).

    Gemma 3's fields: `scale_embedding`: the token embedding times sqrt(width) on the way in
    (the tied readout stays the unscaled embedding); `norm_zero_centred`: every RMSNorm scales
    by (1 + weight), its weight initialised to 0; `attention_scale_dim`: attention logits
    scaled by 1/sqrt(attention_scale_dim) instead of 1/sqrt(d_head) (Gemma's
    `query_pre_attn_scalar`); `logit_softcap` c: the output logits become c tanh(logits / c).

    Cohere 2's fields: `block: parallel`: h = x + attn(norm x) + mlp(norm x), one norm per
    block (`sequential`: the MLP reads the residual after attention); `logit_scale` s: the
    readout logits times s (before any soft-cap); `norm: layernorm_no_bias`.
    """

    width: int = identity(128, export=WRITTEN, needs=None)
    depth: int = identity(2, export=WRITTEN, needs=None)
    head_dim: int | None = identity(32, export=WRITTEN, needs=ATTENTION)
    heads: int | None = identity(None, export=WRITTEN, needs=ATTENTION)
    mlp_ratio: float = identity(4.0, export=WRITTEN, needs=None)
    norm: str = identity("layernorm", export=WRITTEN, needs=None)  # HF: rmsnorm, or Cohere's
    mlp: str = identity("gelu", export=WRITTEN, needs=None)  # swiglu, or geglu in Gemma 3
    parametrization: str = identity("sp", export=only("sp"), needs=None)
    base_width: int = identity(128, export=NOT_IN_CHECKPOINT, needs=None)
    dtype: str = identity("float32", export=NOT_IN_CHECKPOINT, needs=None)
    attention: str = execution("auto", needs=ATTENTION)
    position: PositionConfig = identity(factory=PositionConfig, export=WRITTEN, needs=ATTENTION)
    layers: tuple[LayerConfig, ...] = identity(
        (), neutral=(), label="layout", export=WRITTEN, needs=ATTENTION
    )
    scalable_softmax: bool = identity(
        False, neutral=False, label=Label(" +SSMax"), export=only(False), needs=ATTENTION
    )
    family: str = identity(
        "transformer",
        neutral="transformer",
        label="family",
        export=only("transformer"),
        needs=None,
    )
    kv_heads: int | None = identity(
        None, neutral=None, label=Label(" kv{}"), export=WRITTEN, needs=ATTENTION
    )
    qkv_bias: bool = identity(
        False, neutral=False, label=Label(" +qkv-bias"), export=WRITTEN, needs=ATTENTION
    )
    qk_norm: bool = identity(
        False, neutral=False, label=Label(" +QK-norm"), export=WRITTEN, needs=ATTENTION
    )
    norm_placement: str = identity(
        "pre",
        neutral="pre",
        label=Label(" +{}-norm"),
        export=WRITTEN,
        needs=ATTENTION,
    )
    qk_norm_scope: str = identity(
        "head",
        neutral="head",
        label=Label(" +QK-norm over projection", when="projection"),
        export=WRITTEN,
        needs=ATTENTION,
    )
    tie_embeddings: bool = identity(
        False, neutral=False, label=Label(" +tied"), export=WRITTEN, needs=TIED_READOUT
    )
    scale_embedding: bool = identity(
        False, neutral=False, label=Label(" +sqrt(d) embedding"), export=WRITTEN, needs=ATTENTION
    )
    norm_zero_centred: bool = identity(
        False, neutral=False, label=Label(" +(1+w) norm"), export=WRITTEN, needs=ATTENTION
    )
    attention_scale_dim: float | None = identity(
        None, neutral=None, label=Label(" scale-dim{}"), export=WRITTEN, needs=ATTENTION
    )
    logit_softcap: float | None = identity(
        None, neutral=None, label=Label(" softcap{}"), export=WRITTEN, needs=ATTENTION
    )
    block: str = identity(
        "sequential", neutral="sequential", label=Label(" +{} block"), export=WRITTEN,
        needs=ATTENTION,
    )  # fmt: skip
    logit_scale: float = identity(
        1.0, neutral=1.0, label=Label(" logit-scale{}"), export=WRITTEN, needs=ATTENTION
    )
    norm_eps: float = identity(
        1e-5, neutral=1e-5, label=Label(" eps{}"), export=WRITTEN, needs=NORM_EPS
    )
    init: InitConfig = identity(
        factory=InitConfig,
        neutral=InitConfig(),
        label=Unlabelled("a checkpoint's architecture fields label its curves"),
        export=NOT_IN_CHECKPOINT,
        needs=None,
    )
    arch: Any = variant_field(
        MODELS, "family", role=Role(True, label="family", export=NOT_IN_CHECKPOINT, needs=None)
    )
    attention_fn: str = identity(
        "softmax",
        neutral="softmax",
        label=Label(" +{}"),
        export=only("softmax"),
        needs=ATTENTION,
    )
    attention_options: Any = variant_field(
        ATTENTION_FNS,
        "attention_fn",
        role=Role(
            True,
            label=Unlabelled("no registered attention variant has fields of its own yet"),
            export=NOT_IN_CHECKPOINT,
            needs=ATTENTION,
        ),
    )

    def __post_init__(self) -> None:
        cls = variant_class(MODELS, self.family, "model.family")
        if type(self.arch) is not cls:  # None, or left over from another family by `replace`
            object.__setattr__(self, "arch", cls())
        fn = variant_class(ATTENTION_FNS, self.attention_fn, "model.attention_fn")
        if type(self.attention_options) is not fn:
            object.__setattr__(self, "attention_options", fn())

    @property
    def receptive_field(self) -> int | None:
        """Tokens an output sees, its own included (None: the whole causal prefix)."""
        return self.arch.receptive_field(self)

    @property
    def pattern(self) -> tuple[LayerConfig, ...]:
        """The repeating layer kinds (one default kind when `layers` is empty)."""
        return self.layers or (LayerConfig(),)

    def layer_position(self, layer: LayerConfig) -> PositionConfig:
        """The encoding config a layer kind uses."""
        return layer.position or self.position

    def with_position(self, position: PositionConfig) -> ModelConfig:
        """This config with `position` as the model-wide encoding (to build a layer's own)."""
        return dataclasses.replace(self, position=position)

    @property
    def supports_scaling(self) -> bool:
        """Whether evaluation-time RoPE scaling applies to any layer kind (never in a family
        that declares it does not, the CNN)."""
        return self.arch.supports_scaling and any(
            self.layer_position(layer).options.supports_scaling and layer.eval_scaling
            for layer in self.pattern
        )

    @property
    def scaled_position(self) -> PositionConfig:
        """The encoding config of the first layer kind evaluation scaling applies to."""
        return next(
            self.layer_position(layer)
            for layer in self.pattern
            if self.layer_position(layer).options.supports_scaling and layer.eval_scaling
        )

    @property
    def n_heads(self) -> int:
        """Number of attention heads."""
        return self.heads if self.heads is not None else self.width // (self.head_dim or 1)

    @property
    def d_head(self) -> int:
        """Dimension of each head: `head_dim` when `heads` is set too, else width // heads."""
        if self.heads is not None and self.head_dim is not None:
            return self.head_dim
        return self.width // max(self.n_heads, 1)  # no heads: a family without attention

    @property
    def n_kv_heads(self) -> int:
        """Number of key/value heads (grouped-query attention; `n_heads` without it)."""
        return self.n_heads if self.kv_heads is None else self.kv_heads

    @property
    def attention_width(self) -> int:
        """Width of the concatenated query heads, n_heads x d_head."""
        return self.n_heads * self.d_head

    @property
    def gated_mlp(self) -> bool:
        """Whether the MLP has a gate projection (SwiGLU, GeGLU)."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def d_mlp(self) -> int:
        """Hidden size of the MLP."""
        return round(self.width * self.mlp_ratio)


def check_model(cfg: TrialConfig) -> None:
    """`model.*`: sizes, choices, heads, the encoding (which checks itself against the trial)
    and the layer layout; ConfigError naming the key path."""
    m, p = cfg.model, cfg.model.position
    for name in ("width", "depth", "base_width"):
        check_positive(getattr(m, name), f"model.{name}")
    check_positive(m.mlp_ratio, "model.mlp_ratio")
    check_choice(m.norm, NORMS, "model.norm")
    check_choice(m.mlp, MLPS, "model.mlp")
    check_choice(m.norm_placement, NORM_PLACEMENTS, "model.norm_placement")
    check_choice(m.qk_norm_scope, QK_NORM_SCOPES, "model.qk_norm_scope")
    check_choice(m.block, BLOCKS, "model.block")
    check_choice(m.parametrization, PARAMETRIZATIONS, "model.parametrization")
    check_choice(m.dtype, DTYPES, "model.dtype")
    check_choice(m.attention, ATTENTION_IMPLEMENTATIONS, "model.attention")
    m.arch.check(cfg, f"model.{m.family}")  # first: a family without heads rejects them
    if "heads" not in m.arch.unused_fields:
        _check_heads(m)
    if "position" not in m.arch.unused_fields:
        check_positive(p.max_length, "model.position.max_length")
        p.options.check(cfg, f"model.position.{p.kind}")
    m.attention_options.check(cfg, f"model.{m.attention_fn}")
    if m.attention == "cudnn" and not m.attention_options.fused_ok:
        raise ConfigError(
            f"model.attention: cudnn cannot compute model.attention_fn {m.attention_fn!r}; "
            "use blocked or auto"
        )
    _check_layers(cfg)


def _check_heads(m: ModelConfig) -> None:
    """`model.heads` / `model.head_dim`: one of them dividing the width, or both (heads of
    their own size); `model.kv_heads` dividing the heads; the other pretrained-architecture
    fields."""
    check_positive(m.norm_eps, "model.norm_eps")
    if m.tie_embeddings and m.parametrization != "sp":
        raise ConfigError(
            "model.tie_embeddings: a tied readout is defined for parametrization sp only; "
            f"got model.parametrization={m.parametrization!r}"
        )
    if m.qk_norm_scope != "head" and not m.qk_norm:
        raise ConfigError(f"model.qk_norm_scope: {m.qk_norm_scope!r} needs model.qk_norm: true")
    if m.norm_zero_centred and m.norm != "rmsnorm":
        raise ConfigError(f"model.norm_zero_centred: needs model.norm: rmsnorm, got {m.norm!r}")
    check_positive(m.attention_scale_dim, "model.attention_scale_dim")
    check_positive(m.logit_softcap, "model.logit_softcap")
    check_positive(m.logit_scale, "model.logit_scale")
    if m.block == "parallel" and m.norm_placement != "pre":
        raise ConfigError("model.block: parallel has one norm before both sublayers; needs "
                          f"model.norm_placement: pre, got {m.norm_placement!r}")  # fmt: skip
    if m.attention_scale_dim is not None and m.parametrization == "mup":
        raise ConfigError("model.attention_scale_dim: muP sets the attention scale itself; "
                          "use parametrization sp or ntk")  # fmt: skip
    if m.qk_norm and m.norm != "rmsnorm":
        raise ConfigError(f"model.qk_norm: needs model.norm: rmsnorm, got {m.norm!r}")
    if m.heads is None and m.head_dim is None:
        raise ConfigError("model.heads / model.head_dim: set one of them (or both)")
    if m.kv_heads is not None:
        check_positive(m.kv_heads, "model.kv_heads")
        if m.n_heads % m.kv_heads:
            raise ConfigError(
                f"model.kv_heads: {m.kv_heads} does not divide the {m.n_heads} query heads"
            )
    if m.heads is not None and m.head_dim is not None:
        check_positive(m.heads, "model.heads")
        check_positive(m.head_dim, "model.head_dim")
        return
    if m.heads is not None:
        check_positive(m.heads, "model.heads")
        if m.width % m.heads:
            raise ConfigError(f"model.heads: {m.heads} does not divide model.width={m.width}")
    else:
        check_positive(m.head_dim, "model.head_dim")
        if m.width % m.head_dim:  # type: ignore[operator]
            raise ConfigError(f"model.head_dim: {m.head_dim} does not divide model.width={m.width}")


def _check_layers(cfg: TrialConfig) -> None:
    """`model.layers`: the pattern divides the depth; each kind's encoding checks itself."""
    m = cfg.model
    if not m.layers:
        return
    if m.depth % len(m.layers):
        raise ConfigError(
            f"model.layers: a pattern of {len(m.layers)} kinds does not divide "
            f"model.depth={m.depth}"
        )
    for i, layer in enumerate(m.layers):
        path = f"model.layers[{i}]"
        check_positive(layer.window, f"{path}.window")
        check_positive(layer.attn_scale, f"{path}.attn_scale", allow_zero=True)
        check_positive(layer.floor_scale, f"{path}.floor_scale")
        pos = layer.position
        if pos is None:
            continue
        if pos.randomized or pos.max_length is not None or pos.random_max_length is not None:
            raise ConfigError(
                f"{path}.position: randomized / max_length / random_max_length are set on "
                "model.position only"
            )
        if "embed" in pos.options.hooks:
            raise ConfigError(
                f"{path}.position.kind: {pos.kind!r} adds to the input once; set it as "
                "model.position"
            )
        trained = pos.options.trained_scaling()
        if trained is not None and trained[0] != "default":
            raise ConfigError(
                f"{path}.position.{pos.kind}.scaling: a layer kind trains unscaled; "
                f"got {trained[0]!r}"
            )
        layer_trial = dataclasses.replace(cfg, model=m.with_position(pos))
        pos.options.check(layer_trial, f"{path}.position.{pos.kind}")

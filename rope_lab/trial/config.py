"""The trial's training and evaluation config sections (`train`, `eval`, `eval.decode`) with
their checks (`check_train`, `check_eval`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rope_lab.registry import SCALINGS
from rope_lab.roles import Label, Role, Unlabelled, execution, identity
from rope_lab.typed import ConfigError, Params, check_positive, params_field, thaw

if TYPE_CHECKING:
    from rope_lab.config import TrialConfig

# how a cached decoder treats length-dependent RoPE scalings (`rope_lab.model.kv_cache`)
DECODE_PROTOCOLS = ("prefill_fixed", "per_step_recompute", "per_step_stale", "per_step_full")
# the `protocol` of decode rows whose scaling does not depend on the length: every protocol
# gives the same tokens (tested), so they are decoded once
ANY_PROTOCOL = "any"
# `train.regime`: the network as is, or its linearised twin around initialisation
# (`rope_lab.model.lazy`), which runs the reference attention path (`jax.jvp` does not pass the
# blocked kernel's custom VJP; cuDNN's kernel has no JVP rule either)
REGIMES = ("rich", "lazy")
LAZY_ATTENTION = ("auto", "reference")
# `train.remat`: what a train step's backward keeps per block (`rope_lab.model.transformer`)
REMAT = ("none", "block", "dots", "attention")
FINE_TUNED = Unlabelled("fine-tuned rows are labelled by their method, factor and steps")
# the RoPE evaluation stages: used only by an encoding that `supports_scaling`
SCALING_KEYS = (
    "eval.methods",
    "eval.factors",
    "eval.finetune_steps",
    "eval.finetune_methods",
    "eval.finetune_factors",
)


MATCH_TARGETS = ("network",)  # `train.match.target` names besides a loss in nats


@dataclass(frozen=True)
class MatchConfig:
    """`train.match`: train a lazy twin to a target in-range loss instead of for `train.steps`
    (`rope_lab.trial.match`). `target`: null (off), `network` (the in-range loss of the rich
    trial equal to this one but for `train.regime`, `rich_sibling`, which must have trained
    first) or a loss in nats. The search trains the twin from initialisation at `lr_factors` x
    `train.lr` in turn, each for up to `max_steps_factor` x `train.steps` steps under its own
    warmup-cosine schedule, measuring the in-range loss (the eval stage's batches at L_train)
    every `measure_every` steps (null: `train.log_every`; the finer, the less a run can step
    past the tolerance band between two measurements); it keeps the first model within
    `tolerance` nats of the target, else the closest one seen, and records its lr, steps, loss
    and the target."""

    target: str | float | None = identity(None)
    lr_factors: tuple[float, ...] = identity((1.0, 3.0, 10.0))
    max_steps_factor: float = identity(4.0)
    tolerance: float = identity(0.02)
    measure_every: int | None = identity(None)

    def every(self, log_every: int) -> int:
        """Steps between two in-range measurements of the search."""
        return log_every if self.measure_every is None else self.measure_every


@dataclass(frozen=True)
class TrainConfig:
    """AdamW with linear warmup and cosine decay; `length` is L_train.

    `devices`: train data-parallel over this many local devices (None: all of them); the batch
    is split over them, so `batch_size` must be a multiple of the device count.
    `processes`: train as this many JAX processes on this machine forming one mesh
    (`rope_lab.trial.processes`; 1: this process alone); `devices` then counts each process's
    devices, and the batch splits over all of them. Process 0 writes the rows and the model;
    evaluation runs once, after. Not in trial ids (the same numbers to float rounding).
    `shard_params`: split parameters and optimiser state over those devices too (fully sharded
    data parallelism, `rope_lab.trial.parallel.shard`) instead of a whole copy on each; the same
    numbers to float rounding, so trial ids leave it out.
    `pose_target_length`: train with PoSE (Zhu et al. 2024): each sequence of `length` tokens
    is cut into `pose_chunks` chunks whose position ids are shifted by skips drawn uniformly,
    so they cover [0, pose_target_length) (None: contiguous positions 0..length-1).
    `clip_norm`: the global gradient norm is clipped to it (.inf: never clipped).
    `regime`: `rich` trains the network; `lazy` trains its first-order Taylor expansion around
    initialisation, f(theta_0) + J(theta_0)(theta - theta_0) (`rope_lab.model.lazy`), with the
    same data, loss, optimiser and schedule (weight decay on theta, pulling it towards 0).
    `match`: train a lazy twin to a target in-range loss (`MatchConfig`); off by default.
    `remat`: rematerialisation of the Transformer's blocks in the train step (REMAT): `none`
    keeps every activation for the backward; `block` keeps each block's input and recomputes
    the rest; `dots` keeps the dense layers' matmul outputs; `attention` keeps each block's
    input and the blocked softmax kernel's output and log-sum-exp, so the backward never reruns
    the attention forward (`model.attention: blocked` only). The same numbers to float
    rounding, so trial ids leave it out.
    """

    length: int = identity(64)
    batch_size: int = identity(32)
    steps: int = identity(300)
    lr: float = identity(3e-3)
    warmup_steps: int = identity(30)
    min_lr_ratio: float = identity(0.1)
    weight_decay: float = identity(0.01)
    b1: float = identity(0.9)
    b2: float = identity(0.98)
    eps: float = identity(1e-8)
    clip_norm: float = identity(1.0, infinite=True)  # .inf: no clipping
    seed: int = identity(0)
    log_every: int = identity(10)
    checkpoint_every: int = identity(0)
    eval_every: int = identity(0)
    devices: int | None = execution(None)
    processes: int = execution(1)
    shard_params: bool = execution(False)
    pose_target_length: int | None = identity(None, neutral=None, label=Label(" +PoSE {}"))
    pose_chunks: int = identity(2, neutral=2, label=Label(" PoSE chunks {}"))
    regime: str = identity("rich", neutral="rich", label=Label(" +lazy", when="lazy"))
    remat: str = execution("none")
    match: MatchConfig = identity(
        MatchConfig(),
        neutral=MatchConfig(),
        label=Unlabelled("a matched twin is its network's lazy variant; its trials row says how"),
    )


@dataclass(frozen=True)
class DecodeConfig:
    """Decode-time evaluation (`rope_lab.trial.decode_eval`): the answer of each evaluated sequence
    generated greedily with a key/value cache under each of `protocols` (`DECODE_PROTOCOLS`;
    empty: off). The task's answer length sets how many tokens are generated, at most
    `max_new_tokens` (None: the whole answer); only the generated tokens are scored."""

    protocols: tuple[str, ...] = identity(())
    max_new_tokens: int | None = identity(None)


@dataclass(frozen=True)
class EvalConfig:
    """Length-extrapolation evaluation.

    Lengths are `length_multipliers` x L_train. RoPE models are also evaluated under each
    scaling `method` at each `factor` (zero-shot; and after `finetune_steps` steps at
    factor x L_train when that is > 0, for the `finetune_methods` at the `finetune_factors`
    only when those are given: e.g. `[linear, default]` fine-tunes PI and, as its control,
    unscaled RoPE at the same target length). `method_params` holds per-method parameters, e.g.
    `{llama3: {low_freq_factor: 1, high_freq_factor: 4}}`.
    `pad_to_longest`: pad every length's batches (drawn as without it) to the longest evaluated
    length and run them through one compiled forward program (exact for a causal model): one
    compilation instead of one per length, for more compute at the short lengths; pays off for
    tiny, compile-dominated trials (the smoke sweep).
    `memory_budget_mb`: a batch whose forward would need more (`rope_lab.model.memory`) runs as
    equal sub-batches that fit, with the same numbers; long lengths need no hand-picked
    batch size.
    `text_protocol` (language-model tasks on a text): `random` windows (`batches` x
    `batch_size` per length), or Press et al.'s `nonoverlapping` windows or `sliding` windows
    scoring their last min(`text_stride`, L) bytes (default stride L_train) over the whole
    held-out text, the same text at every length (`tasks.text_lm.text_windows`).
    `zero_shot_temperature`: also evaluate every model (any encoding) with its attention logits
    multiplied by max(1, log L / log L_train) at length L (the entropy-invariance argument), as
    a zero-shot stage of its own next to the RoPE scalings.
    `depths`: for a task with a needle depth (`has_depth`: `niah`, `passkey`), also evaluate
    every length with the needle at each of these relative depths in [0, 1] (0: the start of
    the context, 1: its end), one whole-sequence row per (length, depth) with its `depth`
    (the task's own rows, depth null, stay as they are); the same trained model at every
    depth, so a length x depth table needs no retraining.
    `attention_stats`: also write, per length and layer, where attention puts its mass (first
    token, a sink logit), the output gate's mean and a forget gate's effective window, rows of
    `mode` attention (`rope_lab.trial.attention_rows`), from one more forward by the
    reference path.
    """

    length_multipliers: tuple[float, ...] = identity((0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0))
    batches: int = identity(2)
    batch_size: int = identity(16)
    position_buckets: int = identity(8)
    methods: tuple[str, ...] = identity(("linear", "ntk", "dynamic", "yarn", "llama3"))
    factors: tuple[float, ...] = identity((2.0, 4.0))
    method_params: Params = params_field(
        SCALINGS,
        default=(("llama3", (("high_freq_factor", 4.0), ("low_freq_factor", 1.0))),),
        role=Role(True),
    )
    finetune_steps: int = identity(0)
    finetune_lr: float = identity(1e-3)
    finetune_methods: tuple[str, ...] = identity((), neutral=(), label=FINE_TUNED)
    finetune_factors: tuple[float, ...] = identity((), neutral=(), label=FINE_TUNED)
    accuracy_threshold: float = identity(0.9)
    pad_to_longest: bool = execution(False)
    memory_budget_mb: float = execution(4096.0)
    zero_shot_temperature: bool = identity(
        False, neutral=False, label=Unlabelled("its rows are labelled by their method")
    )
    depths: tuple[float, ...] = identity(())
    attention_stats: bool = identity(
        False, neutral=False, label=Unlabelled("its rows have their own mode, attention")
    )
    text_protocol: str = identity("random", neutral="random", label="protocol")
    text_stride: int | None = identity(None, neutral=None, label="protocol")
    decode: DecodeConfig = identity(DecodeConfig())
    seed: int = identity(1234)

    def params_for(self, method: str) -> dict[str, Any]:
        """Extra parameters of one scaling method, as a dict."""
        for name, params in self.method_params:
            if name == method:
                return thaw(params)
        return {}


def check_train(cfg: TrialConfig) -> None:
    """`train.*`: sizes, schedule, devices and PoSE (which needs an encoding that reads
    positions); ConfigError naming the key path."""
    m, p = cfg.model, cfg.model.position
    tr = cfg.train
    for name in ("length", "batch_size", "lr", "clip_norm"):
        check_positive(getattr(tr, name), f"train.{name}")
    for name in ("steps", "warmup_steps", "weight_decay", "checkpoint_every", "eval_every"):
        check_positive(getattr(tr, name), f"train.{name}", allow_zero=True)
    check_positive(tr.log_every, "train.log_every")
    check_positive(tr.devices, "train.devices")
    if tr.devices is not None and tr.batch_size % tr.devices:
        raise ConfigError(
            f"train.batch_size: {tr.batch_size} is not divisible by train.devices={tr.devices}"
        )
    check_processes(cfg)
    if tr.pose_target_length is not None and tr.pose_target_length < tr.length:
        raise ConfigError(
            f"train.pose_target_length: must be >= train.length={tr.length}, "
            f"got {tr.pose_target_length!r}"
        )
    if not 1 <= tr.pose_chunks <= tr.length:
        raise ConfigError(
            f"train.pose_chunks: must be in [1, train.length={tr.length}], got {tr.pose_chunks!r}"
        )
    reads_positions = any(m.layer_position(k).options.takes_positions for k in m.pattern)
    if tr.pose_target_length is not None and not reads_positions:
        raise ConfigError(
            "train.pose_target_length: PoSE needs an encoding that takes positions, "
            f"not model.position.kind={p.kind!r}"
        )
    if tr.pose_target_length is not None and m.position.randomized:
        raise ConfigError(
            "train.pose_target_length: PoSE and model.position.randomized both choose the "
            "training positions; set one"
        )
    if not 0 <= tr.min_lr_ratio <= 1:
        raise ConfigError(f"train.min_lr_ratio: must be in [0, 1], got {tr.min_lr_ratio!r}")
    check_regime(cfg)
    check_remat(cfg)
    check_match(cfg)


def check_match(cfg: TrialConfig) -> None:
    """`train.match`: at its defaults without a target; else only on a lazy trial trained by
    one process without NTK tracking, a target `network` or a positive loss, at least one
    positive lr factor, `max_steps_factor` >= 1 and `tolerance` >= 0."""
    match, tr = cfg.train.match, cfg.train
    if match.target is None:
        for f in dataclasses.fields(match):
            if getattr(match, f.name) != f.default:  # an unused setting would move the id
                raise ConfigError(
                    f"train.match.{f.name}: set without train.match.target; a trial that does "
                    "not search leaves train.match at its defaults"
                )
        return
    if tr.regime != "lazy":
        raise ConfigError(
            f"train.match.target: matching trains a lazy twin; train.regime={tr.regime!r} "
            "needs no target"
        )
    if isinstance(match.target, str) and match.target not in MATCH_TARGETS:
        raise ConfigError(
            f"train.match.target: unknown {match.target!r}; allowed: "
            f"{', '.join(MATCH_TARGETS)} or a loss in nats"
        )
    if not isinstance(match.target, str):
        check_positive(match.target, "train.match.target")
    if not match.lr_factors:
        raise ConfigError("train.match.lr_factors: empty; the search needs at least one factor")
    for i, factor in enumerate(match.lr_factors):
        check_positive(factor, f"train.match.lr_factors[{i}]")
    if match.max_steps_factor < 1:
        raise ConfigError(
            f"train.match.max_steps_factor: must be >= 1, got {match.max_steps_factor!r}"
        )
    check_positive(match.tolerance, "train.match.tolerance", allow_zero=True)
    check_positive(match.measure_every, "train.match.measure_every")
    if tr.processes != 1:
        raise ConfigError(
            f"train.processes: the train.match search runs in one process, got {tr.processes}"
        )
    if cfg.ntk.enabled:
        raise ConfigError(
            "ntk.enabled: the train.match search tracks no NTK; a matched trial needs false"
        )


def rich_sibling(cfg: TrialConfig) -> TrialConfig:
    """The rich trial `cfg` is matched against: `cfg` with `train.regime: rich` and no
    `train.match` (the same model, task, data, optimiser and eval config)."""
    train = dataclasses.replace(cfg.train, regime="rich", match=MatchConfig())
    return dataclasses.replace(cfg, train=train)


def check_processes(cfg: TrialConfig) -> None:
    """`train.processes`: at least 1; with more, the batch splits over every process's
    devices."""
    tr = cfg.train
    check_positive(tr.processes, "train.processes")
    if tr.processes == 1:
        return
    devices = tr.processes * (tr.devices or 1)
    if tr.batch_size % devices:
        raise ConfigError(
            f"train.batch_size: {tr.batch_size} is not divisible by the {devices} devices of "
            f"train.processes={tr.processes} x train.devices={tr.devices or 1}"
        )


def check_remat(cfg: TrialConfig) -> None:
    """`train.remat` among REMAT; off `none` only for a rich Transformer (the blocks it
    rematerialises); `attention` only where the blocked softmax kernel runs (it keeps that
    kernel's residuals: not the reference path, cuDNN, or a normaliser's own kernel)."""
    remat = cfg.train.remat
    if remat not in REMAT:
        raise ConfigError(f"train.remat: unknown {remat!r}; allowed: {', '.join(REMAT)}")
    if remat == "none":
        return
    if cfg.model.family != "transformer":
        raise ConfigError(
            f"train.remat: {remat!r} rematerialises Transformer blocks; "
            f"model.family={cfg.model.family!r} needs none"
        )
    if cfg.train.regime != "rich":
        raise ConfigError(f"train.remat: {remat!r} needs train.regime=rich; lazy needs none")
    if remat != "attention":
        return
    m = cfg.model
    if m.attention != "blocked":
        raise ConfigError(
            "train.remat: 'attention' keeps the blocked kernel's output and log-sum-exp; "
            f"it needs model.attention=blocked, not {m.attention!r}"
        )
    if m.attention_options.normaliser is not None:
        raise ConfigError(
            "train.remat: 'attention' keeps the softmax kernel's output and log-sum-exp; "
            f"model.attention_fn={m.attention_fn!r} runs its own kernel (use block or dots)"
        )


def check_regime(cfg: TrialConfig) -> None:
    """`train.regime` among REGIMES; a lazy model runs reference attention (`model.attention`
    auto or reference) and has no cached decoding (`eval.decode.protocols` empty)."""
    regime = cfg.train.regime
    if regime not in REGIMES:
        raise ConfigError(f"train.regime: unknown {regime!r}; allowed: {', '.join(REGIMES)}")
    if regime != "lazy":
        return
    if cfg.model.attention not in LAZY_ATTENTION:
        raise ConfigError(
            f"model.attention: {cfg.model.attention!r} has no forward-mode derivative, which "
            f"train.regime=lazy needs; allowed with lazy: {', '.join(LAZY_ATTENTION)} "
            "(auto runs reference)"
        )
    if cfg.eval.decode.protocols:
        raise ConfigError(
            "eval.decode.protocols: cached decoding has no linearised form; "
            "train.regime=lazy needs an empty list"
        )


def check_eval(cfg: TrialConfig) -> None:
    """`eval.*`: lengths, batches, fine-tuning choices among the evaluated scalings,
    threshold, factors; ConfigError naming the key path."""
    tr = cfg.train
    ev = cfg.eval
    for i, mult in enumerate(ev.length_multipliers):
        if mult * tr.length < 1:
            raise ConfigError(
                f"eval.length_multipliers[{i}]: {mult} x train.length={tr.length} is below 1"
            )
    for name in ("batches", "batch_size", "position_buckets", "memory_budget_mb"):
        check_positive(getattr(ev, name), f"eval.{name}")
    check_positive(ev.finetune_steps, "eval.finetune_steps", allow_zero=True)
    for name, chosen, among in (
        ("finetune_methods", ev.finetune_methods, ev.methods),
        ("finetune_factors", ev.finetune_factors, ev.factors),
    ):
        for i, value in enumerate(chosen):
            if value not in among:
                raise ConfigError(
                    f"eval.{name}[{i}]: {value!r} is not among eval.{name[9:]} "
                    f"{list(among)}; fine-tuning applies to evaluated scalings"
                )
    if not 0 < ev.accuracy_threshold <= 1:
        raise ConfigError(
            f"eval.accuracy_threshold: must be in (0, 1], got {ev.accuracy_threshold!r}"
        )
    for i, factor in enumerate(ev.factors):
        if factor < 1:
            raise ConfigError(f"eval.factors[{i}]: factor must be >= 1, got {factor!r}")
    for i, depth in enumerate(ev.depths):
        if not 0 <= depth <= 1:
            raise ConfigError(f"eval.depths[{i}]: must be in [0, 1], got {depth!r}")
    if len(set(ev.depths)) != len(ev.depths):
        raise ConfigError(f"eval.depths: listed twice in {list(ev.depths)}")

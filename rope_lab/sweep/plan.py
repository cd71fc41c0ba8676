"""Cost estimates of a sweep's trials: parameters, tokens, FLOPs (training, fine-tuning,
evaluation, NTK tracking), stages, evaluation and training memory and the decoding cache
(`estimate_cost`), and the devices each trial asks for and trains on (`trial_devices`).
`plan_table.py` prints them as the table of `rope-lab sweep plan`.
"""

from __future__ import annotations

import math

from rope_lab.config import TrialConfig
from rope_lab.model.memory import (
    forward_bytes,
    kv_cache_bytes,
    layer_sets,
    sequences_per_forward,
    train_step_bytes,
)
from rope_lab.ntk.plan import gradient_passes, outputs_per_row
from rope_lab.runtime.device_share import memory_fraction
from rope_lab.sweep.spec import Resources
from rope_lab.tasks import task_from_config
from rope_lab.tasks.windows import window_count
from rope_lab.trial.scaling_plan import (
    finetune_length,
    finetune_scalings,
    position_sets,
    scalings_for,
)
from rope_lab.trial.stage_plan import trial_stages

# A lazy trial's cost over a rich one's (`estimate_cost`; benchmarks/lazy_step.py): a train
# step (forward jvp + its transpose) and an evaluation forward (primal + tangent)
LAZY_STEP = 1.4
LAZY_FORWARD = 2.2


def _attention_params(m) -> int:
    """Weights of one block's attention projections: D A (queries), 2 D A_kv (keys and values
    of the kv heads) and A D (output), A = heads x head_dim, A_kv = kv_heads x head_dim
    (4 D^2 for plain multi-head attention), and D G for the G features of the variant's own
    projections (an output gate, a forget gate: `AttentionFnConfig.projected_features`)."""
    inner, kv = m.attention_width, m.n_kv_heads * m.d_head
    extra = m.attention_options.projected_features(m)
    return 2 * m.width * inner + 2 * m.width * kv + m.width * extra


def _matmul_params(trial: TrialConfig) -> int:
    """Weights of the matmuls: blocks (attention, `_attention_params`, + k D M MLP each) and
    the readout D V (tied or not: it is a matmul either way)."""
    m = trial.model
    k = 3 if m.gated_mlp else 2
    return (
        m.depth * (_attention_params(m) + k * m.width * m.d_mlp) + m.width * trial.task.vocab_size
    )


def forward_flops(trial: TrialConfig, length: int, sets: int = 1) -> int:
    """FLOPs of one forward pass over one length-L sequence: F(L) = 2 N L + 4 depth L^2 D plus
    what each layer's encoding adds (`extra_flops`); a family with its own count (the CNN:
    2 N L, `FamilyConfig.cost`) gives it; see `estimate_cost`. Under a remap of `sets` = S
    position sets a remapped layer computes S logits per pair: 2 (S + 1) L^2 A for its
    attention."""
    m = trial.model
    own = m.arch.cost(m, trial.task.vocab_size, length)
    if own is not None:
        return own["forward_flops"]
    repeats = m.depth // len(m.pattern)
    extra = repeats * sum(
        m.layer_position(layer).options.extra_flops(
            m.with_position(m.layer_position(layer)), length
        )
        for layer in m.pattern
    )
    pairs_matmuls = repeats * sum(s + 1 for s in layer_sets(m, sets))  # q k^T per set, A V
    attention = 2 * pairs_matmuls * length * length * m.attention_width
    return 2 * _matmul_params(trial) * length + attention + extra


def ntk_flops(trial: TrialConfig) -> int:
    """FLOPs of a trial's empirical-NTK tracking (`rope_lab.ntk.plan.gradient_passes`): each
    sequence of a gradient pass costs one forward and `rows` x C backward passes, a backward
    counted as 2 forwards, so F(L) (1 + 2 rows C): 3 F(L) for one output (C = V for `ntk.output`
    "trace", else 1). Kernel contractions on the host are not counted."""
    outputs = outputs_per_row(trial)
    return sum(
        g.count * g.sequences * forward_flops(trial, g.length) * (1 + 2 * g.rows * outputs)
        for g in gradient_passes(trial)
    )


def nngp_flops(trial: TrialConfig) -> int:
    """FLOPs of the NNGP at initialisation (`rope_lab.ntk.nngp.probe_outputs`, `ntk.nngp_samples`
    K > 0): K forwards of every probe sequence (the short probes twice, at positions 0.. and
    + L_train; each long probe set once), all padded to the longest probe length, in chunks of
    `ntk.chunk_size` sequences (the last chunk padded)."""
    nk = trial.ntk
    if not nk.enabled or nk.nngp_samples == 0:
        return 0
    lengths = trial.ntk_lengths
    sequences = nk.probes * (2 + len(lengths))
    chunk = min(nk.chunk_size, sequences)
    longest = max([trial.train.length, *lengths])
    return nk.nngp_samples * math.ceil(sequences / chunk) * chunk * forward_flops(trial, longest)


def n_stages(trial: TrialConfig) -> int:
    """Sweep stages of a trial (`stage_plan.trial_stages`): train, the model as trained, and
    one per scaling (each RoPE method x factor, fine-tuning included; the zero-shot
    temperature)."""
    return len(trial_stages(trial))


def eval_sequences(trial: TrialConfig, length: int) -> int:
    """Sequences one evaluation pass runs at ``length``: `eval.batches` x `batch_size` random
    windows, or under a text protocol every window of the held-out text, in whole groups of
    `batch_size` (`evaluate._window_sums`)."""
    ev = trial.eval
    if ev.text_protocol == "random":
        return ev.batches * ev.batch_size
    size = task_from_config(trial.task).split_tokens("eval").size  # type: ignore[attr-defined]
    stride = min(ev.text_stride or trial.train.length, length)
    windows = window_count(size, length, ev.text_protocol, stride)
    return -(-windows // ev.batch_size) * ev.batch_size


def _transformer_params(trial: TrialConfig) -> tuple[int, int, int]:
    """The Transformer's (n_params, n_params_non_embedding, matmul_params): see
    `estimate_cost`."""
    m = trial.model
    d, v = m.width, trial.task.vocab_size
    norm = 2 * d if m.norm == "layernorm" else d
    matmul = _matmul_params(trial)
    encoding = m.position.options.n_params(m, max_length=trial.max_length)
    for layer in m.layers:
        if layer.position is not None:
            own = m.with_position(layer.position)
            encoding += layer.position.options.n_params(own, max_length=trial.max_length)
    if m.scalable_softmax:
        encoding += m.depth * m.n_heads
    extras = m.depth * m.attention_options.n_params(m)  # what attention computes (sinks)
    if m.qkv_bias:
        extras += m.depth * (m.attention_width + 2 * m.n_kv_heads * m.d_head)
    if m.qk_norm and m.qk_norm_scope == "projection":
        extras += m.depth * (m.attention_width + m.n_kv_heads * m.d_head)
    elif m.qk_norm:
        extras += m.depth * 2 * m.d_head
    readout = 0 if m.tie_embeddings else v * d  # a tied readout is the embedding
    blocks = matmul - v * d  # the blocks' matmul weights
    norms_per_block = {"sandwich": 4}.get(m.norm_placement, 1 if m.block == "parallel" else 2)
    n_params = (
        v * d + readout + encoding + blocks + extras + m.depth * norms_per_block * norm + norm
    )
    # Kaplan et al.'s N: less the token embedding, the (untied) readout and a learned table
    # the model-wide encoding adds to the input (= `model.count_non_embedding_params`)
    position = m.position.options
    table = position.n_params(m, max_length=trial.max_length) if "embed" in position.hooks else 0
    non_embedding = n_params - v * d - readout - table
    return n_params, non_embedding, matmul


def estimate_cost(trial: TrialConfig) -> dict[str, int]:
    """Analytic parameter count, tokens, FLOPs and stages of one trial.

    n_params (trainable, = `model.count_params`): embedding V D, a learned table
    max_length x D, per block the attention projections (4 D^2 for multi-head attention;
    `_attention_params` with grouped-query or decoupled heads; q/k/v biases A + 2 A_kv, QK-norm
    2 head_dim) + k D M (MLP; k = 3 for SwiGLU or GeGLU, else 2) + two norms (four when
    sandwiched, one in a parallel block; 2D each for LayerNorm, D for RMSNorm or LayerNorm
    without bias), a final norm, and the readout D V (none when tied to the embedding).
    n_params_non_embedding (= `model.count_non_embedding_params`): n_params less the
    embedding, the readout and a learned table.
    Forward FLOPs of one length-L sequence (`forward_flops`): F(L) = 2 N L + 4 depth L^2 A,
    where N counts the matmul weights (blocks and readout; embedding and position tables are
    lookups), A = heads x head_dim (= D unless both are set) and 4 L^2 A is Q K^T plus A V
    over the full masked L x L matrix of each layer, plus
    what each layer's encoding adds (`extra_flops`: CoPE's gates, cumulative sums and q . e).
    A training step costs 3 forward passes, so train_flops = 6 N tokens + 12 depth L^2 D per
    sequence (plus 3 x the encodings' extra).
    Fine-tuning (RoPE, eval.finetune_steps > 0) repeats that at factor x L for each scaling;
    evaluation is forward only at every eval length, once per scaling (direct; plus each
    method x factor for RoPE, and again after fine-tuning); ntk_flops is the empirical-NTK
    tracking (`ntk_flops`) and the NNGP at initialisation (`nngp_flops`). A stage under a
    relative-position remap of S position sets (`scaling_plan.position_sets`) evaluates and
    fine-tunes at `forward_flops(trial, L, S)`: S q k^T products per remapped layer. With
    `eval.depths` every pass runs once more per depth.
    total_flops = train + fine-tune + eval + NTK. stages: `n_stages`.
    Periodic hooks other than the NTK tracking are not counted.
    A `train.match` trial counts its search's worst case (`search_steps`: every lr factor run
    to its last step) and its in-range measurements as evaluation at L_train.
    A lazy trial (`train.regime: lazy`) runs one `jax.jvp` of the network per forward and the
    transpose of that jvp per backward, so its train, fine-tune and NTK FLOPs are counted
    x LAZY_STEP (a gradient pass through the jvp) and its eval FLOPs x LAZY_FORWARD, factors
    measured against the rich step in the same run (`benchmarks/lazy_step.py`; the figures:
    benchmarks/RESULTS.md, "Lazy (linearised) vs rich train step and forward").
    A model family with its own counts (`FamilyConfig.cost`) gives its parameters and F(L):
    the CNN's N counts its convolutions (k D^2 per layer, as a matmul over the k taps), MLPs and
    readout, and F(L) = 2 N L (no attention); receptive_field is its window (0 for attention,
    which sees the whole prefix).
    """
    m, tr, ev = trial.model, trial.train, trial.eval
    family_cost = m.arch.cost(m, trial.task.vocab_size, tr.length)
    if family_cost is not None:
        n_params, non_embedding, matmul = (
            family_cost[k] for k in ("n_params", "n_params_non_embedding", "matmul_params")
        )
    else:
        n_params, non_embedding, matmul = _transformer_params(trial)

    finetune = ev.finetune_steps if m.supports_scaling else 0
    ft_runs = finetune_runs(trial)
    # evaluation passes, each with its position sets: as trained, each scaling, each fine-tuned
    passes = [position_sets(trial, s) for s in scalings_for(trial)] + [s for _, s in ft_runs]
    draws = 1 + len(ev.depths)  # each needle depth of `eval.depths` draws its own batches
    eval_seqs = {n: draws * eval_sequences(trial, n) for n in trial.eval_lengths}
    train_steps = search_steps(trial)
    # a search measures its in-range loss every `measure_every` steps, as trained
    every = tr.match.every(tr.log_every)
    measured = train_steps // every if tr.match.target is not None else 0
    measure_seqs = measured * eval_sequences(trial, tr.length)
    as_trained = position_sets(trial, scalings_for(trial)[0])
    train_seqs, ft_seqs = train_steps * tr.batch_size, finetune * tr.batch_size
    cost = {
        "n_params": n_params,
        "n_params_non_embedding": non_embedding,
        "matmul_params": matmul,
        "stages": n_stages(trial),
        "train_tokens": train_seqs * tr.length,
        "train_flops": 3 * train_seqs * forward_flops(trial, tr.length),
        "finetune_tokens": ft_seqs * sum(n for n, _ in ft_runs),
        "finetune_flops": 3 * ft_seqs * sum(forward_flops(trial, n, s) for n, s in ft_runs),
        "eval_tokens": len(passes) * sum(k * n for n, k in eval_seqs.items())
        + measure_seqs * tr.length,
        "eval_flops": sum(
            k * forward_flops(trial, n, s) for s in passes for n, k in eval_seqs.items()
        )
        + measure_seqs * forward_flops(trial, tr.length, as_trained),
        "ntk_flops": ntk_flops(trial) + nngp_flops(trial),
        "receptive_field": m.receptive_field or 0,
        **_memory(trial, n_params, family_cost is None),
        "train_memory_bytes": train_memory(trial, n_params) if family_cost is None else None,
    }
    if tr.regime == "lazy":
        for key, factor in (
            ("train_flops", LAZY_STEP),
            ("finetune_flops", LAZY_STEP),
            ("ntk_flops", LAZY_STEP),
            ("eval_flops", LAZY_FORWARD),
        ):
            cost[key] = round(cost[key] * factor)
    cost["total_flops"] = (
        cost["train_flops"] + cost["finetune_flops"] + cost["eval_flops"] + cost["ntk_flops"]
    )
    return cost


def search_steps(trial: TrialConfig) -> int:
    """Train steps a trial runs at most: `train.steps`, or for a `train.match` search every lr
    factor run for ceil(max_steps_factor x steps) (`rope_lab.trial.match`)."""
    tr = trial.train
    if tr.match.target is None:
        return tr.steps
    return len(tr.match.lr_factors) * max(tr.steps, math.ceil(tr.match.max_steps_factor * tr.steps))


def _memory(trial: TrialConfig, n_params: int, attention: bool) -> dict[str, int]:
    """`eval_memory_bytes`: the parameters plus the largest evaluation forward (the longest
    evaluated length, in the batch `memory.sequences_per_forward` fits; the bound of
    `memory.forward_bytes`, through the configured attention), the largest over the stages (a
    remap's position sets hold more); `kv_cache_bytes`: a decoding cache for the longest
    evaluated length (`memory.kv_cache_bytes`, keys once per position set of the stage with the
    most; 0 for a family without attention). Parameters count 2 bytes when a checkpoint loads
    in bfloat16, else 4. Training and fine-tuning memory is `train_memory`'s."""
    m = trial.model
    width = 2 if m.init.hf is not None and m.dtype == "bfloat16" else 4
    longest = max(trial.eval_lengths)
    stage_sets = {position_sets(trial, s) for s in scalings_for(trial)}
    forward = max(
        forward_bytes(m, trial.task.vocab_size, longest, s)
        * sequences_per_forward(trial, longest, s)
        for s in stage_sets
    )
    return {
        "eval_memory_bytes": n_params * width + forward,
        "kv_cache_bytes": kv_cache_bytes(m, longest, width, max(stage_sets)) if attention else 0,
    }


def finetune_runs(trial: TrialConfig) -> list[tuple[int, int]]:
    """(length, position sets) of each fine-tuning run: `finetune_length` under each fine-tuned
    scaling (`scaling_plan.finetune_scalings`); none without `eval.finetune_steps` or RoPE."""
    if not (trial.eval.finetune_steps and trial.model.supports_scaling):
        return []
    runs = finetune_scalings(trial)
    return [(finetune_length(trial, s), position_sets(trial, s)) for s in runs]


def train_memory(
    trial: TrialConfig, n_params: int, train_devices: int = 1, sharded: bool = False
) -> int | None:
    """Bytes one device holds to train the trial (`memory.train_step_bytes`): the larger of a
    training step at L_train and a fine-tuning step at each fine-tuned factor x L_train (under
    a remap, with its position sets), the batch split over `train_devices` (rounded up) and,
    when `sharded` (FSDP), the parameters and optimiser state too, under `train.remat`
    (what the backward keeps per block). None for a lazy trial (its
    step is a jvp and its transpose, not estimated)."""
    tr = trial.train
    if tr.regime == "lazy":
        return None
    runs = [(tr.length, 1), *finetune_runs(trial)]
    batch = -(-tr.batch_size // train_devices)
    params = -(-n_params // train_devices) if sharded else n_params
    vocab = trial.task.vocab_size
    return max(train_step_bytes(trial.model, vocab, n, batch, params, s, tr.remat) for n, s in runs)


def trial_devices(trial: TrialConfig, resources: Resources) -> dict:
    """What a trial's tasks ask for and train on. `gpus`: `resources.num_gpus`; `per_gpu`: how
    many trials share one GPU (1 / num_gpus, rounded down, for a share; None otherwise);
    `memory_fraction`: the share of its memory each of their JAX processes may preallocate
    (`device_share.memory_fraction`; None: JAX's default); `train_devices`: the devices the
    train step spreads its batch over (`train.devices`, else what the worker sees: the whole
    GPUs it asked for, one GPU for a share, None for every local device of a CPU worker);
    `sharded`: parameters and optimiser state split over them (`train.shard_params`, FSDP);
    `processes`: the JAX processes training spans (`train.processes`; each has
    `train.devices` CPU devices, default 1, and `train_devices` counts them all; under Ray each
    process has a placement-group bundle of `resources`, `rope_lab.trial.placement`);
    `problem`: why the trial cannot train as asked (None when it can)."""
    gpus = resources.num_gpus
    visible = None if gpus == 0 else max(1, int(gpus))  # a share sees one GPU
    asked = trial.train.devices
    processes = trial.train.processes
    problem = None
    if asked is not None and visible is not None and asked > visible:
        problem = f"train.devices {asked} > the {visible} GPU(s) a worker sees"
    train_devices = asked if asked is not None else visible
    if processes > 1:
        train_devices = processes * (asked or 1)
        if gpus > 0:
            problem = problem or "train.processes > 1 trains on CPU devices only (GPUs not wired)"
    if trial.train.shard_params and train_devices == 1:
        problem = problem or "shard_params over one device splits nothing"
    return {
        "gpus": gpus,
        "per_gpu": math.floor(round(1 / gpus, 9)) if 0 < gpus < 1 else None,
        "memory_fraction": memory_fraction(gpus),
        "train_devices": train_devices,
        "sharded": trial.train.shard_params,
        "processes": processes,
        "problem": problem,
    }

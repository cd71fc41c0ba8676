"""Memory estimates of a forward pass, which size evaluation batches (JAX-free).

`forward_bytes` is an upper bound on the temporary memory of one sequence's evaluation forward
(logits and losses included): float32 activations of about 20 D + 2 D_mlp + 4 V per position
(residual stream, q/k/v and their heads-major copies, attention output, MLP hidden and
activation, logits and log-softmax) plus what attention holds at once: about four float32
logits-sized arrays per head (logits, exponentials, weights, their masked copy) and the bias's
own values, per query-key pair held. Under a relative-position remap of S position sets
(`scalings/remaps.py`; `sets`) a remapped layer also holds S - 1 more rotated copies of its
queries and keys and computes all S logits of a pair before keeping one, and a decoding cache
holds its keys once per set. The constants are
calibrated against XLA's own estimate (`Compiled.memory_analysis`) in tests/model/test_memory.py,
which checks the bound holds, within 2.5x, over widths, lengths and vocabularies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rope_lab.config import LayerConfig, ModelConfig, TrialConfig

# Query and key block of the blocked attention kernel: (H, BLOCK, BLOCK) logits at a time.
BLOCK = 512
# `auto` attention on CPU runs the reference path up to this length (it was faster there, see
# benchmarks/long_context.py), the blocked kernel beyond; the reference query blocks below.
REFERENCE_MAX_LENGTH = 2048
ATTENTION_BLOCK = 64
MAX_ATTENTION_BLOCKS = 8


def causal_blocks(length: int) -> list[tuple[int, int]]:
    """Query blocks [(start, stop)) tiling range(length) for the reference attention path.

    Each block attends to keys [0, stop) only, so the matmuls and the softmax skip most of the
    masked upper triangle: with n blocks they cost (n + 1) / (2 n) of full attention. Blocks hold
    at least ATTENTION_BLOCK queries and there are at most MAX_ATTENTION_BLOCKS of them, since
    each is a separately compiled pair of matmuls.
    """
    n = max(1, min(MAX_ATTENTION_BLOCKS, length // ATTENTION_BLOCK))
    size = -(-length // n)
    return [(start, min(start + size, length)) for start in range(0, length, size)]


def attention_pairs(length: int, implementation: str) -> int:
    """Query-key pairs one sequence's attention holds at once: the reference path's largest
    query block against its key prefix, or one (BLOCK x BLOCK) tile of the blocked kernel."""
    if implementation == "reference" or (
        implementation == "auto" and length <= REFERENCE_MAX_LENGTH
    ):
        return max((stop - start) * stop for start, stop in causal_blocks(length))
    block = min(BLOCK, length)
    return block * block


def remapped(model: ModelConfig, layer: LayerConfig) -> bool:
    """Whether an evaluation-time remap (or scaling) applies to layer kind `layer`: its encoding
    `supports_scaling`, the kind has `eval_scaling`, and the model family allows it."""
    position = model.layer_position(layer).options
    return model.arch.supports_scaling and position.supports_scaling and layer.eval_scaling


def layer_sets(model: ModelConfig, sets: int) -> list[int]:
    """Per layer kind of `model.pattern`, the position sets it scores pairs in under a remap
    of `sets` sets (1 for a kind the remap does not apply to)."""
    return [sets if remapped(model, layer) else 1 for layer in model.pattern]


def forward_bytes(model: ModelConfig, vocab: int, length: int, sets: int = 1) -> int:
    """Upper bound on the temporary bytes of one sequence's forward at `length`, under a remap
    of `sets` position sets (see above)."""
    widest = max(model.width, model.attention_width)
    extra_sets = max(layer_sets(model, sets)) - 1
    activations = (
        4
        * length
        * (20 * widest + 2 * model.d_mlp + 4 * vocab + 4 * extra_sets * model.attention_width)
    )
    per_pair = max(
        4 * model.n_heads
        + (s * model.n_heads + 1 if s > 1 else 0)  # the S logits and the choice of set
        + model.layer_position(layer).options.bias_floats_per_pair(
            model.with_position(model.layer_position(layer))
        )
        for layer, s in zip(model.pattern, layer_sets(model, sets), strict=True)
    )
    # a contextual term (CoPE) runs the reference path at every length
    implementation = "reference" if _contextual(model) else model.attention
    return activations + 4 * per_pair * attention_pairs(length, implementation)


def saved_pairs(length: int, implementation: str) -> int:
    """Query-key pairs one layer's attention keeps for the backward pass of one sequence: the
    reference path's every causal block (its weights are saved, `causal_blocks`), none for the
    blocked kernel (it recomputes each tile from the saved log-sum-exp)."""
    if implementation == "reference" or (
        implementation == "auto" and length <= REFERENCE_MAX_LENGTH
    ):
        return sum((stop - start) * stop for start, stop in causal_blocks(length))
    return 0


# floats a position, in units of D, that the scanned stack holds under rematerialisation besides
# the recomputed block's activations (calibrated: `train_step_bytes`)
REMAT_WORKING_WIDTHS = 8


def train_step_bytes(
    model: ModelConfig,
    vocab: int,
    length: int,
    batch: int,
    n_params: int,
    sets: int = 1,
    remat: str = "none",
) -> int:
    """Upper bound on the bytes of one train step of `batch` sequences at `length` (rich
    regime, float32) under rematerialisation `remat` (`train.remat`).

    28 bytes a parameter (7 floats: the parameter and Adam's two moments, then the gradient,
    the update and the new moments before they replace the old; XLA's estimate is 24 where
    parameters dominate). Per sequence, what the backward pass keeps:
    per layer and position 24 D + 6 D_mlp floats (inputs of every matmul, norm and
    activation, with a remap's `sets` - 1 extra rotated queries and keys); per layer and
    saved query-key pair (`saved_pairs`) S + 2 floats a head (S = `sets`) and twice the
    encoding's bias floats (values and gradient); 4x the bias over the pairs one block's
    backward works on at once (`attention_pairs`: values, gradient, saved activations); 3 V
    per position for the logits.

    Calibrated, like `forward_bytes`, against XLA's estimate of the compiled step (arguments
    + temporaries; tests/model/test_memory.py checks the bound lies within 1-2.5x of it) over
    RoPE, ALiBi, T5, KERPLE, FIRE, CoPE, xPos and learned tables, both attention paths; the
    measured ratios: benchmarks/RESULTS.md. A lazy (linearised) model's step is not estimated.

    Rematerialisation changes what the backward keeps per layer (`remat_kept_floats`): `block`
    keeps each block's input, `dots` also its dense matmuls' outputs, `attention` also the
    blocked kernel's output and log-sum-exp, and each holds one
    block's activations (the largest layer kind's, as without rematerialisation) while it is
    recomputed and differentiated, plus REMAT_WORKING_WIDTHS x D floats a position (the
    scanned stack's carried residual stream and cotangents; calibrated on the blocked path at
    D 128, where XLA's estimate exceeds one block's activations by up to 5.3 D).
    """
    widest = max(model.width, model.attention_width)
    implementation = "reference" if _contextual(model) else model.attention
    pairs = saved_pairs(length, implementation)
    kept, working = [], 0
    for layer, s in zip(model.pattern, layer_sets(model, sets), strict=True):
        bias = model.layer_position(layer).options.bias_floats_per_pair(
            model.with_position(model.layer_position(layer))
        )
        per_position = 24 * widest + 6 * model.d_mlp + 4 * (s - 1) * model.attention_width
        kept.append(length * per_position + pairs * ((s + 2) * model.n_heads + 2 * bias))
        # a block backward's bias (values, gradient, saved activations: 4x, calibrated)
        working = max(working, 4 * bias * attention_pairs(length, implementation))
    if remat == "none":
        blocks = sum(kept) * (model.depth // len(model.pattern))
    else:
        recomputing = max(kept) + length * REMAT_WORKING_WIDTHS * model.width
        blocks = model.depth * length * remat_kept_floats(model, remat) + recomputing
    per_sequence = blocks + working + length * 3 * vocab
    return 28 * n_params + 4 * batch * per_sequence


def remat_kept_floats(model: ModelConfig, remat: str) -> int:
    """Floats a position keeps per layer for the backward under rematerialisation `remat`
    (`block`, `dots` or `attention`): the block's input, D; under `attention` also the blocked
    kernel's residuals, its output A and log-sum-exp (one a head); under `dots` also the
    outputs of its dense matmuls (matmuls without batch dimensions; attention's per-head
    products are recomputed): queries, keys and values A + 2 A_kv, the attention output
    projection D, the MLP's input projections (2 D_mlp for a gated MLP's gate and up, else
    D_mlp) and its output D."""
    if remat == "block":
        return model.width
    if remat == "attention":
        return model.width + model.attention_width + model.n_heads
    kv = model.n_kv_heads * model.d_head
    mlp_in = (2 if model.gated_mlp else 1) * model.d_mlp
    return 3 * model.width + model.attention_width + 2 * kv + mlp_in


def _contextual(model: ModelConfig) -> bool:
    """Whether a layer adds a contextual term (CoPE), which runs the reference path always."""
    return any("contextual" in model.layer_position(k).options.hooks for k in model.pattern)


def sequences_per_forward(cfg: TrialConfig, length: int, sets: int = 1) -> int:
    """The largest divisor of `eval.batch_size` whose forward at `length` (under a remap of
    `sets` position sets) fits in `eval.memory_budget_mb` (at least 1: a sequence that alone
    exceeds it still runs)."""
    budget = cfg.eval.memory_budget_mb * 2**20
    per_sequence = forward_bytes(cfg.model, cfg.task.vocab_size, length, sets)
    batch = cfg.eval.batch_size
    fits = [b for b in range(1, batch + 1) if batch % b == 0 and b * per_sequence <= budget]
    return max(fits, default=1)


def kv_cache_bytes(model: ModelConfig, capacity: int, dtype_bytes: int = 4, sets: int = 1) -> int:
    """Bytes of the keys and values a decoding cache for `capacity` tokens holds
    (`rope_lab.model.kv_cache.init_cache`, slot bookkeeping aside): per layer (S + 1) x kv_heads x
    head_dim x slots (keys once per position set, S = 1 without a remap, and values once), a
    sliding-window kind holding min(window, capacity) slots. Grouped-query attention divides it
    by heads / kv_heads. A forget gate (FoX) adds its float32 cumulative log gate per query head
    and slot."""
    repeats = model.depth // len(model.pattern)
    slots = [capacity if k.window is None else min(capacity, k.window) for k in model.pattern]
    vectors = sum((s + 1) * n for n, s in zip(slots, layer_sets(model, sets), strict=True))
    decay = sum(slots) * model.n_heads * 4 if model.attention_options.forget_gate else 0
    return repeats * (vectors * model.n_kv_heads * model.d_head * dtype_bytes + decay)

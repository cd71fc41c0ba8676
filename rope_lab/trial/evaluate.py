"""Length-extrapolation evaluation: metrics per length and per position bucket, under each RoPE
scaling method and factor (zero-shot, dynamic recomputed at every length; the rows after a
short fine-tune at the target length are `rope_lab.trial.finetune`'s) and under the zero-shot
log-length attention temperature (any encoding, its multiplier recomputed at every length),
and the text table. The extrapolation summary of a trial's rows is
`rope_lab.analysis.query.extrapolation_summary`'s.

`evaluate_model` is one pass per scaling and length: build the model under the scaling
(`model_at_length`), draw the length's batches (`draw_batches`, the only reader of how the eval
config samples, pads and splits them), compute the metric sums (`metric_sums`), write the rows
(`rows_for_length`). The helpers follow in that order.

Rows are plain dicts with the `eval` table's columns: step, method, factor, finetune_steps,
length, loss, perplexity, accuracy, exact_match, bits_per_byte (text tasks: nats per token x
tokens / bytes of the scored tokens / ln 2; None otherwise), position_bucket (None for whole
sequences), depth (with `eval.depths`: the needle's relative depth of a whole-sequence row;
absent otherwise), sequences_per_forward (the evaluation batch is split to fit
`eval.memory_budget_mb`). With `eval.attention_stats` each length also gets the rows of
`rope_lab.trial.attention_rows` (`mode` attention), from the same batches (`DrawnBatches.inputs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from rope_lab.config import TrialConfig, thaw
from rope_lab.model.memory import sequences_per_forward
from rope_lab.model.positions.modules import batch_positions
from rope_lab.model.transformer import Transformer, with_scaling, with_temperature
from rope_lab.runtime.xla_options import FEW_CALLS
from rope_lab.tasks import Batch, Task
from rope_lab.tasks.text_lm import text_windows
from rope_lab.trial.attention_rows import attention_rows
from rope_lab.trial.eval_rows import rows_for_length
from rope_lab.trial.objective import token_losses
from rope_lab.trial.scaling_plan import (
    NO_SCALING,
    TEMPERATURE,
    Scaling,
    log_length_temperature,
    position_sets,
    scalings_for,
)


def evaluate_model(
    model: Transformer,
    task: Task,
    cfg: TrialConfig,
    *,
    step: int,
    scalings: Iterable[Scaling] | None = None,
    finetune_steps: int = 0,
    lengths: Sequence[int] | None = None,
) -> list[dict]:
    """Eval rows for each scaling and length: the model under the scaling at that length, the
    length's batches (the same data key for every scaling, so methods are compared on identical
    batches), their metric sums, a whole-sequence row and one row per position bucket."""
    lengths = cfg.eval_lengths if lengths is None else lengths
    key = jax.random.PRNGKey(cfg.eval.seed)
    rows: list[dict] = []
    for scaling in scalings_for(cfg) if scalings is None else scalings:
        labels = {
            "step": step,
            "method": scaling.method,
            "factor": scaling.factor,
            "finetune_steps": finetune_steps,
        }
        sets = position_sets(cfg, scaling)
        for length in lengths:
            scaled = model_at_length(model, cfg, scaling, length)
            at_key = jax.random.fold_in(key, length)
            batches = draw_batches(task, cfg, length, key=at_key, sets=sets)
            sums = metric_sums(scaled, batches)
            rows += rows_for_length(sums, length, cfg.eval.position_buckets, labels)
            if cfg.eval.attention_stats:
                inputs = draw_batches(task, cfg, length, key=at_key, sets=sets).inputs()
                rows += attention_rows(scaled, inputs, cfg, length, labels, sets)
            rows += depth_rows(scaled, task, cfg, length, labels, key=key, sets=sets)
    return rows


def depth_rows(
    model: Transformer,
    task: Task,
    cfg: TrialConfig,
    length: int,
    labels: dict,
    *,
    key,
    sets: int = 1,
) -> list[dict]:
    """One whole-sequence row per depth of `eval.depths` at `length`, carrying its `depth`:
    the task with its needle at that depth (`Task.at_depth`), drawn from the length's key at
    every depth (the same haystacks, keys and values: only the needle moves)."""
    rows: list[dict] = []
    for depth in cfg.eval.depths:
        at = task.at_depth(depth)
        batches = draw_batches(at, cfg, length, key=jax.random.fold_in(key, length), sets=sets)
        rows += rows_for_length(metric_sums(model, batches), length, 0, {**labels, "depth": depth})
    return rows


def evaluate_length(
    model: Transformer, task: Task, cfg: TrialConfig, length: int, *, key
) -> dict[str, np.ndarray | float]:
    """Per-position loss sums, correct counts and scored counts (each (L,)) plus exact match
    and `sequences_per_forward`: `metric_sums` of the batches `draw_batches` draws at `length`
    from `key`."""
    return metric_sums(model, draw_batches(task, cfg, length, key=key))


# 1. The model under a scaling.
def model_at_length(
    model: Transformer, cfg: TrialConfig, scaling: Scaling, length: int
) -> Transformer:
    """`model` as evaluated under `scaling` at `length`: RoPE frequencies recomputed for the
    method at `length` (dynamic depends on it); `NO_SCALING` as is; `TEMPERATURE` the model as
    trained (`scalings_for(cfg)[0]` at `length`) with every attention logit times
    `log_length_temperature(length, L_train)`, which is 1, the model as trained, up to L_train."""
    temperature = scaling.method == TEMPERATURE
    frequencies = scalings_for(cfg)[0] if temperature else scaling
    if frequencies.method != NO_SCALING:
        model = with_scaling(
            model, frequencies.method, frequencies.factor, thaw(frequencies.params), seq_len=length
        )
    if temperature:
        model = with_temperature(model, log_length_temperature(length, cfg.train.length))
    return model


# 2. The batches of a length.
# One evaluation batch as the function that runs a model on it: model -> `_sums` of the batch.
BatchRun = Callable[[Transformer], Any]
# The inputs of a length's evaluation batches, unpadded: (B, L) batch and (B, L) positions.
BatchInputs = Callable[[], Iterator[tuple[Batch, Array]]]


class DrawnBatches(NamedTuple):
    """The evaluation batches of one length, drawn lazily in order as `metric_sums` runs them
    (so iterable once)."""

    batches: Iterator[BatchRun]
    length: int
    sequences_per_forward: int
    inputs: BatchInputs  # the same batches as model inputs (`eval.attention_stats`)
    single_answer: bool  # False for windows of text, which have no exact match
    counts_bytes: bool = False  # the task's tokens are text: sums carry their bytes


def _byte_table(task: Task) -> jax.Array | None:
    """Bytes per token id (V,) float32 for a text task, else None."""
    table = task.token_bytes()
    return None if table is None else jnp.asarray(table, jnp.float32)


def draw_batches(task: Task, cfg: TrialConfig, length: int, *, key, sets: int = 1) -> DrawnBatches:
    """The batches of one length as the eval config asks: `eval.batches` batches sampled from the
    eval split (`_sampled_batches`), or every window of the held-out text under a
    `text_protocol` other than random (`_text_batches`); forwards split to fit the memory
    budget under a remap of `sets` position sets (`scaling_plan.position_sets`)."""
    if cfg.eval.text_protocol != "random":
        return _text_batches(task, cfg, length, key=key, sets=sets)
    return _sampled_batches(task, cfg, length, key=key, sets=sets)


def _sampled_batches(
    task: Task, cfg: TrialConfig, length: int, *, key, sets: int = 1
) -> DrawnBatches:
    """Batch b sampled from fold_in(key, b), sampling and forward in one program per length.

    With `eval.pad_to_longest` the batches (drawn exactly as without it) are padded to the
    longest evaluated length and run through one forward program shared by all lengths; the
    model is causal, so the padding changes no real position's loss (`metric_sums` cuts it
    off). A batch whose forward exceeds `eval.memory_budget_mb` runs as sub-batches that fit
    (drawn whole, so the numbers do not change)."""
    ev = cfg.eval
    operands = task.operands("eval")
    padded_length = max(length, *cfg.eval_lengths) if ev.pad_to_longest else length
    chunk = sequences_per_forward(cfg, padded_length, sets)
    nbytes = _byte_table(task)

    def batches() -> Iterator[BatchRun]:
        for b in range(ev.batches):
            batch_key = jax.random.fold_in(key, b)
            if ev.pad_to_longest or chunk < ev.batch_size:
                # The key split runs outside the per-length program: one less threefry to compile.
                keys = jax.random.split(batch_key)
                batch, positions = _drawn_batch(
                    task, operands, keys, ev.batch_size, length, cfg, padded_length
                )
                yield partial(
                    _split_sums, batch=batch, positions=positions, chunk=chunk, nbytes=nbytes
                )
            else:  # sampled inside its forward program
                yield partial(
                    _batch_sums,
                    task=task,
                    operands=operands,
                    key=batch_key,
                    batch_size=ev.batch_size,
                    length=length,
                    cfg=cfg,
                    **({} if nbytes is None else {"nbytes": nbytes}),
                )

    def inputs() -> Iterator[tuple[Batch, Array]]:
        for b in range(ev.batches):
            keys = jax.random.split(jax.random.fold_in(key, b))
            yield _drawn_batch(task, operands, keys, ev.batch_size, length, cfg, length)

    return DrawnBatches(
        batches(), length, chunk, single_answer=True, counts_bytes=nbytes is not None, inputs=inputs
    )


def _text_batches(task: Task, cfg: TrialConfig, length: int, *, key, sets: int = 1) -> DrawnBatches:
    """Under `eval.text_protocol` `nonoverlapping` or `sliding`: every window of the whole
    held-out text (`text_windows`, stride min(`text_stride` or L_train, L)), in groups of
    `eval.batch_size` sequences (the last group padded with unscored rows, so one program
    serves all groups of a length), positions of group g from fold_in(key, g).
    `eval.pad_to_longest` is not applied: a text of n bytes is n / L windows at length L, so
    padding every window to the longest length would multiply the work at the short lengths
    (6x over 0.5x..8x) to save a few compilations."""
    ev = cfg.eval
    (data,) = task.operands("eval")
    stride = min(ev.text_stride or cfg.train.length, length)
    tokens, targets, mask = text_windows(np.asarray(data), length, ev.text_protocol, stride)
    rows = -(-tokens.shape[0] // ev.batch_size) * ev.batch_size
    pad = ((0, rows - tokens.shape[0]), (0, 0))
    tokens, targets, mask = (np.pad(a, pad) for a in (tokens, targets, mask))
    chunk = sequences_per_forward(cfg, length, sets)
    nbytes = _byte_table(task)

    def inputs() -> Iterator[tuple[Batch, Array]]:
        for g, start in enumerate(range(0, rows, ev.batch_size)):
            part = slice(start, start + ev.batch_size)
            batch = Batch(
                tokens=jnp.asarray(tokens[part]),
                targets=jnp.asarray(targets[part]),
                mask=jnp.asarray(mask[part]),
            )
            positions = batch_positions(
                cfg, batch_size=ev.batch_size, length=length, key=jax.random.fold_in(key, g)
            )
            yield batch, positions

    def batches() -> Iterator[BatchRun]:
        for batch, positions in inputs():
            yield partial(_split_sums, batch=batch, positions=positions, chunk=chunk, nbytes=nbytes)

    return DrawnBatches(
        batches(),
        length,
        chunk,
        single_answer=False,
        counts_bytes=nbytes is not None,
        inputs=inputs,
    )


def _draw(
    task: Task, operands, keys, batch_size: int, length: int, cfg: TrialConfig
) -> tuple[Batch, Int[Array, "B L"]]:
    """One evaluation batch at `length` from keys (2, key) = split(batch key): (B, L)
    tokens/targets/mask and (B, L) positions."""
    batch = task.sample_from(operands, batch_size, length, key=keys[0])
    return batch, batch_positions(cfg, key=keys[1], batch_size=batch_size, length=length)


@eqx.filter_jit(compiler_options=FEW_CALLS)  # type: ignore[call-overload]
def _drawn_batch(
    task: Task, operands, keys, batch_size: int, length: int, cfg, padded_length: int
) -> tuple[Batch, Int[Array, "B P"]]:
    """The batch and positions of `_batch_sums` at `length`, padded on the right to
    `padded_length` P (P = length: no padding): token and target 0, mask False, positions
    repeating the last real one.

    Pad slots are unscored and, the model being causal, change no real slot's logits, so any
    valid position is exact; repeating the last real one (rather than continuing p+1, p+2, ...)
    stays inside the range the encoding already handles at this length, e.g. a learned table's
    `max_length` rows, which continuing after randomized positions could overrun."""
    batch, positions = _draw(task, operands, keys, batch_size, length, cfg)
    pad = ((0, 0), (0, padded_length - length))
    padded = Batch(
        tokens=jnp.pad(batch.tokens, pad),
        targets=jnp.pad(batch.targets, pad),
        mask=jnp.pad(batch.mask, pad),
    )
    return padded, jnp.pad(positions, pad, mode="edge")


# 3. Their metric sums.
def metric_sums(model: Transformer, drawn: DrawnBatches) -> dict[str, Any]:
    """Per-position loss sums, correct counts and scored counts (each (L,)) over every batch,
    exact match over every sequence with a scored token (NaN for windows of text),
    `sequences_per_forward` and, for a text task, the bytes of the scored targets (L,) (else
    None). Positions past L (padding) are cut off."""
    length = drawn.length
    loss_sum, correct, count = np.zeros(length), np.zeros(length), np.zeros(length)
    byte_sum = np.zeros(length) if drawn.counts_bytes else None
    exact = n_seq = 0.0
    for run in drawn.batches:
        (ls, cs, ns, *bs), ex, nq = run(model)
        loss_sum += np.asarray(ls, np.float64)[:length]
        correct += np.asarray(cs, np.float64)[:length]
        count += np.asarray(ns, np.float64)[:length]
        if byte_sum is not None:
            byte_sum += np.asarray(bs[0], np.float64)[:length]
        if drawn.single_answer:
            exact += float(ex)
            n_seq += float(nq)
    return {
        "loss_sum": loss_sum,
        "correct": correct,
        "count": count,
        "byte_sum": byte_sum,
        "exact_match": exact / max(n_seq, 1.0) if drawn.single_answer else math.nan,
        "sequences_per_forward": drawn.sequences_per_forward,
    }


@eqx.filter_jit(compiler_options=FEW_CALLS)  # type: ignore[call-overload]
def _batch_sums(
    model: Transformer, task: Task, operands, key, batch_size: int, length: int, cfg, nbytes=None
):
    """Sampling and forward at `length` in one program (one compilation per length)."""
    batch, positions = _draw(task, operands, jax.random.split(key), batch_size, length, cfg)
    return _sums(model, batch, positions, nbytes)


@eqx.filter_jit(compiler_options=FEW_CALLS)  # type: ignore[call-overload]
def _forward_sums(model: Transformer, batch: Batch, positions: Int[Array, "B P"], nbytes=None):
    """`_sums` as a forward program of its own: compiled once per model structure and (B, P),
    shared by every RoPE scaling (only arrays change), every length under
    `eval.pad_to_longest`, and every sub-batch of a batch split by the memory budget. A
    temperature t != 1 is static (`with_temperature`), so each such length compiles its own."""
    return _sums(model, batch, positions, nbytes)


def _split_sums(model: Transformer, batch: Batch, positions: Array, chunk: int, nbytes=None):
    """`_sums` of a (B, P) batch as B / chunk sub-batches of `chunk` sequences, added up."""
    total = None
    for start in range(0, batch.tokens.shape[0], chunk):
        part = jax.tree.map(lambda x, start=start: x[start : start + chunk], (batch, positions))
        sums = _forward_sums(model, *part, nbytes)
        total = sums if total is None else jax.tree.map(jnp.add, total, sums)
    return total


def _sums(model: Transformer, batch: Batch, positions: Int[Array, "B P"], nbytes=None):
    """Per-position loss sums, correct and scored counts (each (P,)), with `nbytes` (V,) (bytes
    per token id) the scored targets' bytes (P,) too, then exact-match and scored sequence
    counts (scalars) of one batch; unscored (mask False) slots contribute nothing."""
    losses, correct = token_losses(model, batch, positions)
    mask = batch.mask
    per_position: tuple[jax.Array, ...] = (
        jnp.sum(jnp.where(mask, losses, 0.0), axis=0),
        jnp.sum(mask & correct, axis=0),
        jnp.sum(mask, axis=0),
    )
    if nbytes is not None:
        per_position += (jnp.sum(jnp.where(mask, nbytes[batch.targets], 0.0), axis=0),)
    exact = jnp.all(correct | ~mask, axis=1) & jnp.any(mask, axis=1)
    return per_position, jnp.sum(exact), jnp.sum(jnp.any(mask, axis=1))


# A trial's rows summarised.
def extrapolation_summary(rows: Sequence[dict], train_length: int, threshold: float) -> list[dict]:
    """`rope_lab.analysis.query.extrapolation_summary` of one trial's eval rows, as dicts in the
    rows'
    order of (method, factor, finetune_steps): `in_distribution_accuracy` (accuracy at
    `train_length`) and `longest_length`, the longest evaluated L >= `train_length` such that
    every evaluated length in [train_length, L] keeps accuracy >= threshold x that value (None
    without a `train_length` row). Rows without a `loss` are allowed here."""
    import polars as pl

    from rope_lab.analysis import query

    whole = [r for r in rows if r["position_bucket"] is None and r.get("depth") is None]
    if not whole:
        return []
    keys = ("method", "factor", "finetune_steps")
    frame = pl.DataFrame(
        {
            "trial_id": ["trial"] * len(whole),
            "method": [r["method"] for r in whole],
            "factor": [float(r["factor"]) for r in whole],
            "finetune_steps": [int(r["finetune_steps"]) for r in whole],
            "length": [int(r["length"]) for r in whole],
            "accuracy": [float(r["accuracy"]) for r in whole],
            "loss": [float(r.get("loss", math.nan)) for r in whole],
            "train.length": [train_length] * len(whole),
        }
    )
    summary = query.extrapolation_summary(frame, threshold=threshold)
    found = {tuple(s[k] for k in keys): s for s in summary.to_dicts()}
    return [
        {
            **dict(zip(keys, key, strict=True)),
            "in_distribution_accuracy": found[key]["reference"],
            "longest_length": found[key]["longest_length"],
        }
        for key in frame.select(keys).unique(maintain_order=True).rows()
    ]


def format_table(rows: Sequence[dict], metric: str = "accuracy") -> str:
    """Text table: one line per (method, factor, finetune_steps), one column per length (the
    rows at a set depth, `eval.depths`, left out)."""
    whole = [r for r in rows if r["position_bucket"] is None and r.get("depth") is None]
    lengths = sorted({r["length"] for r in whole})
    keys: list[tuple] = []
    cells: dict[tuple, dict[int, float]] = {}
    for r in whole:
        k = (r["method"], r["factor"], r["finetune_steps"])
        if k not in cells:
            keys.append(k)
            cells[k] = {}
        cells[k][r["length"]] = r[metric]
    head = f"{'method':<12}{'factor':>7}{'ft':>6} " + "".join(f"{n:>9}" for n in lengths)
    lines = [f"{metric} by evaluation length", head, "-" * len(head)]
    for k in keys:
        vals = "".join(f"{cells[k].get(n, math.nan):>9.3f}" for n in lengths)
        lines.append(f"{k[0]:<12}{k[1]:>7g}{k[2]:>6} {vals}")
    return "\n".join(lines)

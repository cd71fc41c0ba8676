"""Decode-time evaluation: answers produced by greedy decoding with a key/value cache, scored.

For tasks whose scored targets are the same-length suffix of every sequence (passkey's digits,
copy's segment), the prompt is each sequence up to the answer and the model generates the
answer token by token (`rope_lab.model.decode.generate`, feeding its own tokens back), under each
scaling and dynamic-scaling protocol (`kv_cache.PROTOCOLS`). Rows go to the eval table with
`mode` "decode" and the `protocol`: `exact_match` (the whole answer right) and `accuracy`
(answer tokens right) per length, next to the teacher-forced rows (`mode` null) of the same
scaling. Fine-tuned models are not decoded.

Every length decodes at one capacity, the longest length's: prompts are right-padded to it
and their lengths, the answer lengths and the scaling's encodings are arguments
(`decode_padded.generate_padded`), so a stage compiles one program per cache program
(`decode_padded.PROGRAMS`: prefill_fixed and per_step_stale share one) instead of one per (length,
protocol, scaling); the zero-shot temperature, a static multiplier, still compiles one per
distinct temperature. The tokens are those of the per-length programs (`padded=False`,
kept as the reference: tests/trial/test_decode_eval.py, benchmarks/decode_programs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.config import ANY_PROTOCOL, TrialConfig, freeze, thaw
from rope_lab.model.decode import generate
from rope_lab.model.decode_padded import PROGRAMS, generate_padded, step_encodings
from rope_lab.model.transformer import Transformer, with_scaling, with_temperature
from rope_lab.registry import SCALINGS
from rope_lab.tasks import Task
from rope_lab.trial.scaling_plan import (
    NO_SCALING,
    TEMPERATURE,
    Scaling,
    log_length_temperature,
    scalings_for,
)

DECODE: Final = "decode"  # the eval table's `mode` of decoded rows (teacher forcing: null)


def answer_length(mask: np.ndarray) -> int:
    """m: the scored targets of every row of `mask` (B, L) are its last m positions.
    ValueError when they are not one common suffix (the task has no single answer to
    generate)."""
    mask = np.asarray(mask, bool)
    m = int(mask[0].sum())
    want = np.zeros(mask.shape[1], bool)
    want[mask.shape[1] - m :] = True
    if m == 0 or not (mask == want).all():
        raise ValueError(
            "decode evaluation needs each sequence's scored targets to be one answer at its "
            "end, the same length in every sequence (the tasks with answer_at_end)"
        )
    return m


def decode_scores(
    model: Transformer,
    tokens: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    *,
    protocol: str,
    scaling: tuple[str, float, dict | None] | None,
    max_new_tokens: int | None = None,
    capacity: int | None = None,
    max_steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy answers to a batch (B, L): per sequence, whether the whole answer is right (B,)
    and the fraction of its tokens that are (B,). The prompt is tokens[: L - m + 1] (its last
    token predicts the first answer token); m = `answer_length(mask)`. With `max_new_tokens`
    only the first min(m, max_new_tokens) answer tokens are generated and scored.

    `capacity` (>= L) and `max_steps` (>= the m generated): decode in the program shared by
    every length up to `capacity` and answer up to `max_steps` (`decode_padded.generate_padded`);
    None: a program of this length's own shapes (`decode.generate`), the same tokens."""
    length = tokens.shape[1]
    m = answer_length(mask)
    p = length - m + 1
    prompt = np.asarray(tokens[:, :p])
    answer = np.asarray(targets[:, length - m :])
    if max_new_tokens is not None:
        m = min(m, max_new_tokens)
        answer = answer[:, :m]
    if capacity is None:
        frozen = None if scaling is None else (scaling[0], scaling[1], freeze(scaling[2] or {}))
        produced = np.asarray(_answers(model, prompt, m, length, protocol, frozen))
    else:
        steps = m if max_steps is None else max_steps
        if capacity < length or steps < m:
            raise ValueError(
                f"capacity {capacity} / max_steps {steps} below this batch's length {length} / "
                f"answer {m}"
            )
        buffers = np.zeros((prompt.shape[0], capacity), np.int32)
        buffers[:, :p] = prompt  # right-padded: the causal prefix never reads the pads
        encodings = (
            None if scaling is None else step_encodings(model, scaling, protocol, p, m, steps)
        )
        program = PROGRAMS[protocol] if scaling is not None else PROGRAMS["prefill_fixed"]
        lengths = (jnp.asarray(p, jnp.int32), jnp.asarray(m, jnp.int32))
        out = _answers_padded(model, jnp.asarray(buffers), *lengths, steps, program, encodings)
        produced = np.asarray(out)[:, :m]
    right = produced == answer
    return right.all(axis=1), right.mean(axis=1)


@eqx.filter_jit
def _answers(model, prompts, steps: int, capacity: int, protocol: str, scaling):
    """Greedy answers (B, steps) to prompts (B, P), compiled once per shape and protocol."""
    rope = None if scaling is None else (scaling[0], scaling[1], thaw(scaling[2]))
    one = lambda p: generate(model, p, steps, capacity, protocol=protocol, scaling=rope)[0]
    return jax.vmap(one)(prompts)


@eqx.filter_jit
def _answers_padded(model, buffers, prompt_length, steps, max_steps: int, program: str, encodings):
    """Greedy answers (B, max_steps) to right-padded prompts (B, C), the first `steps` of each
    generated (the rest 0): one program per (C, max_steps, program, encodings' shapes)."""
    one = lambda b: generate_padded(
        model, b, prompt_length, steps, max_steps, program=program, encodings=encodings
    )[0]
    return jax.vmap(one)(buffers)


def compiled_programs() -> dict[str, int]:
    """Programs compiled so far in this process by the decode stage's generation: `padded`
    (one capacity for every length) and `per_length` (`padded=False`)."""
    return {
        "padded": _answers_padded._cached._cache_size(),  # type: ignore[attr-defined]
        "per_length": _answers._cached._cache_size(),  # type: ignore[attr-defined]
    }


def decode_rows(
    model: Transformer,
    task: Task,
    cfg: TrialConfig,
    *,
    step: int,
    scaling: Scaling,
    protocols: Sequence[str],
    lengths: Sequence[int] | None = None,
    padded: bool = True,
) -> list[dict]:
    """Eval rows (`mode` "decode") of greedy decoding under `scaling` at each length: the
    sequences teacher forcing reads (`evaluate.evaluate_length`'s draws: `eval.batches` x
    `batch_size` of the eval split), positions 0..L-1. Under each of `protocols` when the
    scaling's frequencies depend on the length (`length_dependent`: dynamic NTK), else once,
    as protocol `ANY_PROTOCOL`. `padded`: every length at the longest one's capacity and
    answer length (one program for them all); False: one program per length (the same
    rows)."""
    ev = cfg.eval
    key = jax.random.PRNGKey(ev.seed)
    operands = task.operands("eval")
    rows: list[dict] = []
    drawn = {}
    for length in cfg.eval_lengths if lengths is None else lengths:
        task.validate(length, "eval")
        drawn[length] = [
            task.sample_from(operands, ev.batch_size, length, key=jax.random.split(
                jax.random.fold_in(jax.random.fold_in(key, length), b))[0])
            for b in range(ev.batches)
        ]  # fmt: skip
    capacity = max_steps = None
    if padded and drawn:
        capacity = max(drawn)
        answers = [answer_length(np.asarray(b.mask)) for bs in drawn.values() for b in bs]
        cap = ev.decode.max_new_tokens
        max_steps = max(a if cap is None else min(a, cap) for a in answers)
    for length, batches in drawn.items():
        model_l, rope = _decoded(model, cfg, scaling, length)
        varies = rope is not None and SCALINGS[rope[0]].length_dependent
        for protocol in protocols if varies else (ANY_PROTOCOL,):
            exact, accuracy = [], []
            for batch in batches:
                e, a = decode_scores(
                    model_l,
                    np.asarray(batch.tokens),
                    np.asarray(batch.targets),
                    np.asarray(batch.mask),
                    protocol="prefill_fixed" if protocol == ANY_PROTOCOL else protocol,
                    scaling=rope,
                    max_new_tokens=ev.decode.max_new_tokens,
                    capacity=capacity,
                    max_steps=max_steps,
                )
                exact.append(e)
                accuracy.append(a)
            rows.append(
                {
                    "step": step,
                    "method": scaling.method,
                    "factor": scaling.factor,
                    "finetune_steps": 0,
                    "length": length,
                    "accuracy": float(np.concatenate(accuracy).mean()),
                    "exact_match": float(np.concatenate(exact).mean()),
                    "mode": DECODE,
                    "protocol": protocol,
                }
            )
    return rows


def _decoded(
    model: Transformer, cfg: TrialConfig, scaling: Scaling, length: int
) -> tuple[Transformer, tuple[str, float, dict | None] | None]:
    """The model to decode sequences of `length` with, and the RoPE scaling `generate` applies
    under its protocol (None: the model as it is). A relative-position remap is applied here:
    it is one program whatever the length (its cache holds the keys of each position set)."""
    if scaling.method == NO_SCALING:
        return model, None
    if SCALINGS[scaling.method].remaps:
        params = thaw(scaling.params)
        return with_scaling(model, scaling.method, scaling.factor, params, seq_len=length), None
    if scaling.method == TEMPERATURE:
        trained = scalings_for(cfg)[0]
        base, rope = _decoded(model, cfg, trained, length)
        return with_temperature(base, log_length_temperature(length, cfg.train.length)), rope
    return model, (scaling.method, scaling.factor, thaw(scaling.params))

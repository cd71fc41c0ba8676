"""Greedy generation as one compiled program for every prompt length, answer length and
scaling: `generate_padded` runs `rope_lab.model.decode.generate`'s operations on a prompt
right-padded to the cache capacity, with the lengths traced and the encodings' arrays
(`StepEncodings`, from `step_encodings` on the host) as arguments. `PROGRAMS` names the
program each cache protocol (`kv_cache.PROTOCOLS`) runs.
"""

from __future__ import annotations

from typing import Final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from rope_lab.model.decode import decode_step, own_encodings, prefill_padded
from rope_lab.model.kv_cache import PROTOCOLS, KVCache
from rope_lab.model.transformer import Transformer, with_scaling

# The program each protocol generates with once its encodings are arguments (`StepEncodings`):
# prefill_fixed is per_step_stale with one scaling everywhere, so the two share a program.
PROGRAMS: Final = {
    "prefill_fixed": "cached",
    "per_step_stale": "cached",
    "per_step_recompute": "recompute",
    "per_step_full": "full",
}


class StepEncodings(eqx.Module):
    """The encoding arrays (those of `model.position` and `model.layer_positions`) a padded
    generation runs under: `prompt`, the prompt's forward's; `steps`, each later step's,
    stacked along a leading axis of `max_steps - 1` (entries past the generation's own steps
    are never read)."""

    prompt: tuple
    steps: tuple


def _encoding_arrays(model: Transformer) -> tuple:
    return eqx.filter((model.position, model.layer_positions), eqx.is_array)


def _with_encoding_arrays(model: Transformer, arrays: tuple) -> Transformer:
    """The model under the encodings whose arrays are `arrays` (`_encoding_arrays` of the
    model under a scaling)."""
    model = own_encodings(model)
    _, static = eqx.partition((model.position, model.layer_positions), eqx.is_array)
    encs = eqx.combine(arrays, static)
    return eqx.tree_at(lambda m: (m.position, m.layer_positions), model, encs)


def step_encodings(
    model: Transformer,
    scaling: tuple[str, float, dict | None],
    protocol: str,
    prompt_length: int,
    steps: int,
    max_steps: int,
) -> StepEncodings:
    """The encodings `generate(model, prompt, steps, protocol=protocol, scaling=scaling)` reads
    for a prompt of `prompt_length`, as arrays for `generate_padded` (computed on the host:
    the lengths are Python ints here). prefill_fixed: the scaling at prompt + steps - 1
    everywhere; the per-step protocols: at the prompt length for the prefill and at p + t for
    the step that reads token t. Steps past `steps` (up to `max_steps`) repeat the last."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown decode protocol {protocol!r}; allowed: {', '.join(PROTOCOLS)}")
    if not 1 <= steps <= max_steps:
        raise ValueError(f"steps {steps} must be in 1..max_steps ({max_steps})")
    method, factor, params = scaling
    p = prompt_length
    # NumPy on the host: an eager jnp op per shape would compile a program of its own
    found: dict[int, tuple] = {}

    def at(n: int) -> tuple:
        if n not in found:
            scaled = with_scaling(model, method, factor, params, seq_len=n)
            found[n] = jax.tree.map(np.asarray, _encoding_arrays(scaled))
        return found[n]

    if protocol == "prefill_fixed":
        # the longest prefix read: the last token is never fed back
        prompt = last = at(p + steps - 1)
        lengths: list[int] = []
    else:
        prompt = at(p)
        lengths = list(range(p + 1, p + steps))  # the step reading token t sees p + t tokens
        last = at(lengths[-1]) if lengths else prompt
    trees = [at(n) for n in lengths] + [last] * (max_steps - 1 - len(lengths))
    if trees:
        stacked = jax.tree.map(lambda *a: np.stack(a), *trees)
    else:
        stacked = jax.tree.map(lambda a: np.broadcast_to(a, (0, *a.shape)), prompt)
    return StepEncodings(prompt, stacked)


def generate_padded(
    model: Transformer,
    buffer: Int[Array, " C"],
    prompt_length: Int[Array, ""],
    steps: Int[Array, ""],
    max_steps: int,
    *,
    program: str = "cached",
    encodings: StepEncodings | None = None,
) -> tuple[Int[Array, " S"], Float[Array, "S V"]]:
    """`generate` with the prompt buffer[:prompt_length] right-padded to the capacity C of
    `buffer`, and `prompt_length` and `steps` traced: one compiled program for every prompt
    length and answer length up to `max_steps` = S (and, with `encodings` as arguments, every
    scaling whose arrays have the same shapes). Tokens (S,) and logits (S, V): the first
    `steps` equal `generate`'s (the same operations on the same values: a causal prefix
    does not read the pads, empty cache slots are masked), the rest are 0. Needs
    prompt_length + steps - 1 <= C (not checked: traced). `program`: `PROGRAMS[protocol]`;
    `encodings`: `step_encodings(...)` of the scaling under that protocol, None for the
    model as given."""
    if program not in set(PROGRAMS.values()):
        raise ValueError(f"unknown program {program!r}; allowed: cached, recompute, full")
    p = jnp.asarray(prompt_length, jnp.int32)
    steps = jnp.asarray(steps, jnp.int32)
    at_prompt = model if encodings is None else _with_encoding_arrays(model, encodings.prompt)
    stacked = None if encodings is None else encodings.steps
    cache: KVCache | None = None
    if program == "full":
        first = at_prompt(buffer)[p - 1]
    else:
        logits, cache = prefill_padded(at_prompt, buffer, p, raw_keys=program == "recompute")
        first = logits[p - 1]
    token = jnp.argmax(first).astype(jnp.int32)
    tokens = jnp.zeros((max_steps,), jnp.int32).at[0].set(token)
    rows = jnp.zeros((max_steps, first.shape[-1]), first.dtype).at[0].set(first)

    def model_at(t):
        if stacked is None:
            return model
        return _with_encoding_arrays(model, jax.tree.map(lambda a: a[t - 1], stacked))

    def full_step(t, carry):  # step t feeds token t - 1 back at index p + t - 1, yields token t
        buffer, token, tokens, rows = carry
        n = p + t - 1
        buffer = buffer.at[n].set(token)
        logits = model_at(t)(buffer)[n]
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return buffer, nxt, tokens.at[t].set(nxt), rows.at[t].set(logits)

    def cached_step(t, carry):
        cache, token, tokens, rows = carry
        logits, cache = decode_step(model_at(t), cache, token, rotate_cache=program == "recompute")
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return cache, nxt, tokens.at[t].set(nxt), rows.at[t].set(logits)

    state = buffer if program == "full" else cache
    step = full_step if program == "full" else cached_step
    carry = (state, token, tokens, rows)
    _, _, tokens, rows = jax.lax.fori_loop(1, jnp.minimum(steps, max_steps), step, carry)
    return tokens, rows


__all__ = ["PROGRAMS", "StepEncodings", "generate_padded", "step_encodings"]

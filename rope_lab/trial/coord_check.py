"""Coordinate check (Tensor Programs V): how each layer's activation size at init, and its change
after a few optimiser steps, scale with width under each parametrisation.

For every (parametrisation, width) the trial's model is built afresh, its activations recorded
on one fixed held-out batch (`layer_activations`), trained `steps` steps at the constant peak
learning rate (no warmup, no decay), and recorded again on the same batch. A row per layer
holds the RMS at init and the RMS of the change. Under a parametrisation whose learning rates
transfer across width (muP) the change of every layer is width-independent (slope ~0 in
log width); under SP with Adam the logits' change grows about linearly in width.

Layers: `embedding` (token embedding plus any additive position embedding), then per block
`block{i}.attn` and `block{i}.mlp` (the branch outputs added to the residual stream) and
`block{i}.residual` (the stream after the block), and `logits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from rope_lab.config import ConfigError, replace
from rope_lab.model.config import PARAMETRIZATIONS

if TYPE_CHECKING:
    import polars as pl
    from jaxtyping import Array, Int

    from rope_lab.config import TrialConfig
    from rope_lab.model.transformer import Transformer

DEFAULT_STEPS = 4
COLUMNS = ("parametrization", "width", "layer", "rms_init", "rms_change", "steps", "lr")


class CoordCheckError(ConfigError):
    """A coordinate check asked for something it cannot measure."""


def layer_activations(model: Transformer, tokens: Int[Array, "B L"]) -> dict[str, Array]:
    """Each layer's activations on `tokens` (B, L): `embedding`, `block{i}.attn`,
    `block{i}.mlp`, `block{i}.residual` (B, L, D) and `logits` (B, L, V), in forward order;
    the logits equal `model(tokens)`."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1], dtype=jnp.int32), tokens.shape)
    x = model.embed(tokens, positions)
    out = {"embedding": x}
    pattern = model.config.pattern
    for i in range(model.config.depth):
        block = jax.tree.map(lambda a, i=i: a[i] if eqx.is_array(a) else a, model.blocks)
        kind = i % len(pattern)
        encoding, layer = model.encoding_of(kind), pattern[kind]
        attn = block.attn(block.attention_input(x), positions, encoding, layer,
                          model.temperature)  # fmt: skip
        after = block.finish(x, attn)
        x = block.add_attention(x, attn)
        mlp, x = after - x, after  # the MLP's (normalised) contribution
        out |= {f"block{i}.attn": attn, f"block{i}.mlp": mlp, f"block{i}.residual": x}
    out["logits"] = model.readout(x)
    return out


def _rms(x: Array) -> float:
    return float(jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32)))))


def check_request(cfg: TrialConfig, widths: Sequence[int], parametrizations: Sequence[str]) -> None:
    """CoordCheckError naming what is wrong with the widths, parametrisations or model."""
    if len(widths) < 2 or any(w <= 0 for w in widths) or len(set(widths)) != len(widths):
        raise CoordCheckError(f"--widths {list(widths)}: give two or more distinct positive widths")
    if cfg.model.heads is not None or cfg.model.head_dim is None:
        raise CoordCheckError("model.heads: leave it unset; widths grow heads at fixed head_dim")
    for w in widths:
        if w % cfg.model.head_dim:
            raise CoordCheckError(
                f"--widths: {w} is not a multiple of model.head_dim={cfg.model.head_dim}"
            )
    unknown = [p for p in parametrizations if p not in PARAMETRIZATIONS]
    if unknown or not parametrizations:
        raise CoordCheckError(
            f"--parametrizations: {unknown[0] if unknown else 'none given'!r} is not one of "
            f"{', '.join(PARAMETRIZATIONS)}"
        )
    if cfg.model.family != "transformer":
        raise CoordCheckError(f"model.family={cfg.model.family!r}: only transformer is checked")


def coord_check(
    cfg: TrialConfig,
    widths: Sequence[int],
    parametrizations: Sequence[str] = PARAMETRIZATIONS,
    *,
    steps: int = DEFAULT_STEPS,
) -> pl.DataFrame:
    """Rows (COLUMNS) of activation RMS at init and RMS change after `steps` steps at
    `cfg.train.lr`, per parametrisation, width and layer (`cfg.model.base_width` as given)."""
    import polars as pl

    from rope_lab.trial.train import make_model, make_task_from, train

    check_request(cfg, widths, parametrizations)
    if steps < 1:
        raise CoordCheckError(f"--steps {steps}: give at least one step")
    task = make_task_from(cfg)
    batch = task.sample(cfg.train.batch_size, cfg.train.length, "eval", key=jax.random.key(1))
    record = eqx.filter_jit(layer_activations)
    rows = []
    for param in parametrizations:
        for width in widths:
            trial = replace(
                cfg,
                **{
                    "model.width": width,
                    "model.parametrization": param,
                    "train.steps": steps,
                    "train.warmup_steps": 0,
                    "train.min_lr_ratio": 1.0,
                },
            )
            model = make_model(trial)
            before = record(model, batch.tokens)
            after = record(train(trial, model=model).model, batch.tokens)
            for layer, x in before.items():
                rows.append((param, width, layer, _rms(x), _rms(after[layer] - x), steps))
    frame = pl.DataFrame(rows, schema=COLUMNS[:-1], orient="row")
    return frame.with_columns(lr=pl.lit(cfg.train.lr))


def width_slopes(frame: pl.DataFrame) -> pl.DataFrame:
    """Least-squares slope of log RMS against log width per (parametrization, layer), for
    `rms_init` and `rms_change` (`slope_init`, `slope_change`; null where an RMS is 0, as a
    zero-initialised readout's logits are)."""
    import polars as pl

    def slope(widths: list[int], values: list[float]) -> float | None:
        if min(values) <= 0:
            return None
        return float(np.polyfit(np.log(widths), np.log(values), 1)[0])

    out = []
    for (param, layer), group in frame.group_by("parametrization", "layer", maintain_order=True):
        w = group.get_column("width").to_list()
        out.append(
            (
                param,
                layer,
                slope(w, group.get_column("rms_init").to_list()),
                slope(w, group.get_column("rms_change").to_list()),
            )
        )
    schema = {
        "parametrization": pl.String,
        "layer": pl.String,
        "slope_init": pl.Float64,
        "slope_change": pl.Float64,
    }
    return pl.DataFrame(out, schema=schema, orient="row")


__all__ = [
    "COLUMNS",
    "DEFAULT_STEPS",
    "CoordCheckError",
    "check_request",
    "coord_check",
    "layer_activations",
    "width_slopes",
]

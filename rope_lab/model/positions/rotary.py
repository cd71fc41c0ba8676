"""The rotary family: RoPE (Su et al. 2021) and every encoding that rotates q and k by
position x frequency. Scalings belong here: `RotaryConfig` computes the frequencies of any
registered scaling method (`rope_lab.model.rope.inv_freq`), so a subclass (xPos, say) is
evaluated and fine-tuned under every scaling without code elsewhere.

This module is the config side (NumPy frequencies, checks); the rotating module `RotaryPE` and
`with_rope_scaling` are `modules/rotary.py`, where the frequencies are fixed buffers
(`Frozen`), so swapping them for another scaling method at evaluation does not recompile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rope_lab.model import rope
from rope_lab.model.positions.base import EncodingConfig, known_scaling
from rope_lab.registry import POSITIONS, SCALINGS
from rope_lab.roles import Role, identity
from rope_lab.typed import ConfigError, Params, params_field, thaw

if TYPE_CHECKING:
    from rope_lab.config import ModelConfig
    from rope_lab.model.positions.modules.base import PositionEncoding
    from rope_lab.model.positions.modules.rotary import RotaryPE


@dataclass(frozen=True)
class RotaryConfig(EncodingConfig):
    """Base of the rotary family (not registered itself): base `theta`, rotated fraction of each
    head, the training-time scaling (`scaling` at `factor`, with that method's `params`).

    A subclass that changes the frequencies (HoPE's zeroed pairs, say) overrides
    `frequencies`, the one place they are made: the model as built, every evaluation scaling,
    fine-tuning and the remaps' inner encoding all read it. A subclass that changes how the
    rotation is applied (xPos's decay) overrides `make_module` to build a `RotaryPE` subclass
    around the frequencies it is given; whatever it does to them is replaced by
    `frequencies`' (`build`), so an encoding can never hold frequencies its scaled versions
    lose. Evaluation-time scalings, their checks and fine-tuning come from here. In results its
    fields are columns `model.position.<kind>.<field>`, so every rotary kind's training-time
    scaling reads the same.
    """

    theta: float = identity(10000.0)
    rotary_fraction: float = identity(1.0)
    scaling: str = identity("default")
    factor: float = identity(1.0)
    params: Params = params_field(SCALINGS, "scaling", role=Role(True))

    hooks = frozenset({"rotate"})
    family = "relative"
    supports_scaling = True

    def rotary_dim(self, model: ModelConfig) -> int:
        """Rotated dimensions per head: rotary_fraction x head_dim, rounded down to even."""
        return int(model.d_head * self.rotary_fraction) // 2 * 2

    def frequencies(
        self,
        model: ModelConfig,
        train_length: int,
        *,
        kind: str | None = None,
        factor: float | None = None,
        params: dict | None = None,
        seq_len: int | None = None,
    ) -> tuple[np.ndarray, float]:
        """(rotary_dim // 2,) inverse frequencies and attention factor: the one override point
        of a rotary encoding's frequencies (the class docstring).

        Defaults to the training-time scaling; `kind`/`factor`/`params` override it (evaluation
        under another method), with `train_length` as the original length.
        """
        if kind is None:
            kind, factor, params = self.scaling, self.factor, thaw(self.params)
        return rope.inv_freq(
            kind,
            self.rotary_dim(model),
            theta=self.theta,
            factor=1.0 if factor is None else factor,
            original_length=train_length,
            seq_len=seq_len if seq_len is not None else train_length,
            **(params or {}),
        )

    def build(self, model, *, max_length, train_length, key) -> RotaryPE:
        """The module (`make_module`) holding `frequencies` of the training-time scaling at
        the training length."""
        from rope_lab.model.positions.modules.rotary import (
            with_rope_scaling,  # deferred: imports JAX
        )

        inv, attention_factor = self.frequencies(model, train_length)
        module = self.make_module(inv, attention_factor, model)
        return with_rope_scaling(module, inv, attention_factor)

    def make_module(
        self, inv_freq: np.ndarray, attention_factor: float, model: ModelConfig
    ) -> RotaryPE:
        """The encoding module around its (rotary_dim // 2,) frequencies and attention factor
        (set again from `frequencies` by `build`: override `frequencies` to change them)."""
        from rope_lab.model.positions.modules.rotary import RotaryPE  # deferred: imports JAX

        return RotaryPE(inv_freq, attention_factor)

    def with_scaling(
        self, encoding, model, *, train_length, kind, factor, params, seq_len
    ) -> PositionEncoding:
        """The same rotary encoding with the frequencies of `kind` at `factor` and `seq_len`,
        `train_length` the original length (same array shapes: no recompilation). A method
        that `remaps` keeps the encoding's frequencies and wraps it in its position sets
        (`modules/remapped.py`; a new program)."""
        from rope_lab.model.positions.modules.remapped import rescaled  # deferred: imports JAX

        return rescaled(
            self,
            encoding,
            model,
            train_length=train_length,
            kind=kind,
            factor=factor,
            params=params,
            seq_len=seq_len,
        )

    def trained_scaling(self) -> tuple[str, float, tuple]:
        """The training-time (method, factor, params)."""
        return self.scaling, self.factor, self.params

    def slug(self) -> str:
        """'-linear2' for a model trained under a scaling method, else ''."""
        return "" if self.scaling == "default" else f"-{self.scaling}{self.factor:g}"

    def layer_tag(self) -> str:
        """The base of a layer kind's own rotary encoding ('1e+06')."""
        return f"{self.theta:g}"

    def check(self, trial, path) -> None:
        """Rotated dims, the training-time scaling and every evaluation scaling are valid."""
        super().check(trial, path)
        ev, length = trial.eval, trial.train.length
        if self.theta <= 0:
            raise ConfigError(f"{path}.theta: must be > 0, got {self.theta!r}")
        if not 0 < self.rotary_fraction <= 1:
            raise ConfigError(
                f"{path}.rotary_fraction: must be in (0, 1], got {self.rotary_fraction!r}"
            )
        dim = self.rotary_dim(trial.model)
        if dim < 2:
            raise ConfigError(
                f"{path}.rotary_fraction: rotates {dim} dims of head_dim={trial.model.d_head}; "
                "need at least 2"
            )
        if self.scaling in SCALINGS and SCALINGS[self.scaling].remaps:
            raise ConfigError(
                f"{path}.scaling: {self.scaling!r} remaps relative positions at evaluation only; "
                "put it in eval.methods"
            )
        check_scaling(self.scaling, dim, self.factor, length, thaw(self.params), path)
        for i, method in enumerate(ev.methods):
            for factor in ev.factors:
                check_scaling(
                    method, dim, factor, length, ev.params_for(method), f"eval.methods[{i}]"
                )


@POSITIONS.register("rope")
@dataclass(frozen=True)
class RopeConfig(RotaryConfig):
    """RoPE as used in training."""

    label = "RoPE"
    order = 4
    color = "#d62728"


def check_scaling(kind: str, rotary_dim: int, factor: float, length: int, params: dict, path: str):
    """ConfigError naming `path` unless `kind` at `factor` is a valid scaling for the model."""
    known_scaling(kind, path)
    try:
        rope.validate_scaling(
            kind, max(rotary_dim, 2), factor=factor, original_length=length, **params
        )
    except ValueError as err:
        raise ConfigError(f"{path} ({kind}, factor {factor:g}): {err}") from None


def rotary_dim_of(m: ModelConfig) -> int:
    """Rotated dimensions per head of the model-wide rotary encoding."""
    return m.position.options.rotary_dim(m)


def rope_frequencies(cfg: ModelConfig, train_length: int, **scaling) -> tuple[np.ndarray, float]:
    """(rotary_dim // 2,) inverse frequencies and attention factor of the model-wide rotary
    encoding (`RotaryConfig.frequencies`)."""
    return cfg.position.options.frequencies(cfg, train_length, **scaling)

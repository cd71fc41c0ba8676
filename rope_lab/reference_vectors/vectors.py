"""What the tables are built from (`Vectors`): the cases of every method (or of chosen ones),
their frequencies computed once, the tiny Llama-shaped Transformer with deterministic NumPy
weights and its input tokens; and `logits_under`, the model's logits under one case's scaling
(one compiled forward per shape: the scalings only swap frequency buffers).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from rope_lab.config import ModelConfig, PositionConfig
from rope_lab.reference_vectors.grid import Case, _methods, grid_cases, model_cases
from rope_lab.reference_vectors.parameters import (
    LOGIT_LENGTHS,
    MODEL,
    MODEL_THETA,
    SEED,
    TRAIN_LENGTH,
    VOCAB,
)


class Vectors:
    """What the tables are built from: the cases (of every method, or of `methods`), their
    frequencies, the tiny model and its input tokens."""

    def __init__(self, methods: tuple[str, ...] | None = None) -> None:
        self.methods = _methods(methods)
        self.cases: list[Case] = grid_cases(self.methods) + model_cases(self.methods)
        self._freqs: dict[str, tuple[np.ndarray, float]] = {}

    def frequencies(self, case: Case) -> tuple[np.ndarray, float]:
        """The case's (d/2,) float32 frequencies and attention factor (computed once)."""
        if case.case_id not in self._freqs:
            self._freqs[case.case_id] = case.frequencies()
        return self._freqs[case.case_id]

    @cached_property
    def model(self) -> Any:
        """The tiny Transformer: every trainable weight drawn N(0, 0.4^2) by NumPy's generator
        of seed `SEED` in the order of the model's leaves (+1 for the 1-D norm weights), so its
        logits are O(1) and differ between scalings."""
        # deferred: JAX, Equinox and the model import only when the model is built
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        from rope_lab.model.positions.rotary import RopeConfig
        from rope_lab.model.transformer import Transformer

        cfg = ModelConfig(
            **MODEL, position=PositionConfig(kind="rope", options=RopeConfig(theta=MODEL_THETA))
        )
        skeleton = eqx.filter_eval_shape(
            lambda: Transformer(
                cfg, VOCAB, train_length=TRAIN_LENGTH, max_length=1, key=jax.random.PRNGKey(0)
            )
        )
        model = eqx.tree_at(
            lambda m: m.position,
            skeleton,
            cfg.position.options.build(cfg, max_length=1, train_length=TRAIN_LENGTH, key=None),
        )
        rng = np.random.default_rng(SEED)  # NumPy draws: the same weights on every platform

        def draw(x: jax.ShapeDtypeStruct) -> jax.Array:
            normal = 0.4 * rng.standard_normal(x.shape) + (len(x.shape) == 1)
            return jnp.asarray(normal, jnp.float32)

        is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)
        return jax.tree.map(lambda x: draw(x) if is_shape(x) else x, model, is_leaf=is_shape)

    @cached_property
    def tokens(self) -> np.ndarray:
        """(max LOGIT_LENGTHS,) int32 tokens; a forward of length L reads the first L."""
        rng = np.random.default_rng(SEED)
        return rng.integers(0, VOCAB, max(LOGIT_LENGTHS)).astype(np.int32)


def logits_under(model: Any, case: Case, tokens: np.ndarray) -> np.ndarray:
    """(L, V) float32 logits of `model` on tokens (L,) under the case's scaling, taken at
    seq_len = L where the method depends on the length."""
    # deferred: imports JAX
    import jax.numpy as jnp

    from rope_lab.model.transformer import with_scaling

    seq = case.seq_len if case.seq_len is not None else len(tokens)
    scaled = with_scaling(model, case.method, case.factor, dict(case.params), seq_len=seq)
    return np.asarray(_forward(scaled, jnp.asarray(tokens)), dtype=np.float32)


def _forward(model: Any, tokens: Any) -> Any:
    """model(tokens), compiled once per shape (the scalings only swap frequency buffers)."""
    import equinox as eqx  # deferred: imports JAX

    global _FORWARD
    if _FORWARD is None:

        def call(m: Any, t: Any) -> Any:
            return m(t)

        _FORWARD = eqx.filter_jit(call)
    return _FORWARD(model, tokens)


_FORWARD: Any = None

"""Tiny configs and small helpers shared by tests."""

import contextlib
import os
from collections.abc import Iterator
from typing import NoReturn

import numpy as np
import pytest

from rope_lab.config import (
    EvalConfig,
    ModelConfig,
    NTKConfig,
    PositionConfig,
    TaskConfig,
    TrainConfig,
    TrialConfig,
)
from rope_lab.model.positions import RopeConfig


def tiny_trial(
    kind: str = "rope",
    *,
    width: int = 32,
    depth: int = 1,
    head_dim: int = 8,
    length: int = 16,
    steps: int = 20,
    task: str = "passkey",
    vocab: int = 24,
    task_params: tuple = (("needle_length", 2),),
    scaling: str = "default",
    factor: float = 1.0,
    **train_overrides,
) -> TrialConfig:
    """A trial small enough to train in a second on a CPU."""
    return TrialConfig(
        name="tiny",
        model=ModelConfig(
            width=width,
            depth=depth,
            head_dim=head_dim,
            position=PositionConfig(kind=kind, options=RopeConfig(scaling=scaling, factor=factor)),
        ),
        task=TaskConfig(name=task, vocab_size=vocab, params=task_params),
        train=TrainConfig(
            length=length, batch_size=8, steps=steps, log_every=5, warmup_steps=2, **train_overrides
        ),
        eval=EvalConfig(
            length_multipliers=(0.5, 1.0, 2.0),
            batches=1,
            batch_size=4,
            position_buckets=2,
            methods=("linear", "dynamic"),
            factors=(2.0,),
        ),
        ntk=NTKConfig(probe_multipliers=(2.0,)),
    )


def unavailable(reason: str) -> NoReturn:
    """Skip a test whose real components (Slurm, a Ray cluster) cannot be started here; under
    CI=true fail instead, so a CI run never reports a skipped system test as passing."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: this test must run, not skip)")
    pytest.skip(reason)


def ntk_against_jacrev(model, tokens, where):
    """Check `sequence_kernel(model, tokens, tokens, output="trace")` against the brute-force
    kernel of F(x) = sum_i logits_i / sqrt(V) from `jax.jacrev` over every trainable parameter,
    and that the parameters `where(params)` selects contribute to it (the check would fail
    without their columns). Returns (per-sequence Jacobians (N, V, P) float64, the selected
    columns (P,) bool, `columns(where) -> (P,) bool` for further selections)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    from rope_lab.model.transformer import trainable
    from rope_lab.ntk.kernels import sequence_kernel

    tokens = np.asarray(tokens)
    params, static = eqx.partition(model, trainable(model))
    flat, unravel = ravel_pytree(params)

    def logits(theta, tok):
        return eqx.combine(unravel(theta), static)(tok)

    with jax.default_matmul_precision("highest"):
        jac = jax.vmap(jax.jacrev(logits), in_axes=(None, 0))(flat, jnp.asarray(tokens))
    jac = np.asarray(jac, np.float64)  # (N, L, V, P)
    per_seq = jac.sum(1) / np.sqrt(jac.shape[2])  # (N, V, P)
    want = np.einsum("ncp,mcp->nm", per_seq, per_seq)
    got = np.asarray(sequence_kernel(model, tokens, tokens, output="trace"), np.float64)
    tol = {"rtol": 2e-4, "atol": 1e-6 * np.abs(want).max()}
    np.testing.assert_allclose(got, want, **tol)

    def columns(select) -> np.ndarray:
        mask = jax.tree.map(jnp.zeros_like, params)
        mask = eqx.tree_at(select, mask, replace_fn=jnp.ones_like)
        return np.asarray(ravel_pytree(mask)[0]) == 1

    own = columns(where)
    assert np.abs(per_seq[..., own]).max() > 0  # the selected parameters reach the outputs
    part = np.einsum("ncp,mcp->nm", per_seq[..., own], per_seq[..., own])
    assert not np.allclose(got, want - part, **tol)
    return per_seq, own, columns


@contextlib.contextmanager
def recorded_token_windows() -> Iterator[list[tuple[int, int, np.ndarray]]]:
    """Within the block, every batch a token-corpus task hands to training is appended to the
    yielded list as (seed, step, its input windows (B, L))."""
    from rope_lab.tasks.token_lm import TokenLMTask

    read: list[tuple[int, int, np.ndarray]] = []
    original = TokenLMTask.host_batch

    def record(self, batch_size, length, *, seed, step):
        out = original(self, batch_size, length, seed=seed, step=step)
        read.append((seed, step, out[0]))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TokenLMTask, "host_batch", record)
        yield read

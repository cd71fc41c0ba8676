"""`eval.depths`: one trained model scored with its needle at each depth, rows carrying `depth`."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import polars as pl
import pytest

from rope_lab.config import ConfigError, replace, validate
from rope_lab.tasks import task_from_config
from rope_lab.trial.evaluate import evaluate_model, extrapolation_summary
from rope_lab.trial.scaling_plan import NO_SCALING, Scaling
from rope_lab.trial.stage_plan import eval_stages, reading
from tests.helpers import tiny_trial


class FirstHalfReader(eqx.Module):
    """A stand-in model that reads a needle only in the first half of its context: every
    position predicts the token two after the first NEEDLE (id 0) before L / 2, else 0."""

    vocab: int = eqx.field(static=True)

    def __call__(self, tokens, positions):
        length = tokens.shape[-1]
        seen = (tokens == 0) & (jnp.arange(length)[None, :] < length // 2)
        at = jnp.argmax(seen, axis=-1)
        value = jnp.take_along_axis(tokens, (at + 2)[:, None], axis=-1)[:, 0]
        pred = jnp.where(jnp.any(seen, axis=-1), value, 0)
        hot = jax.nn.one_hot(pred, self.vocab)[:, None, :]
        return jnp.broadcast_to(hot, (*tokens.shape, self.vocab)) * 30.0


def _cfg(**changes):
    cfg = tiny_trial("none", task="niah", vocab=40, task_params=(("value_length", 1),))
    return validate(
        replace(
            cfg,
            **{"eval.length_multipliers": (1.0, 2.0), "eval.depths": (0.0, 0.25, 1.0), **changes},
        )
    )


def test_depth_rows_score_the_needle_where_it_was_put() -> None:
    """Single needle, H = L - 3, block of 3 tokens: it starts at round(d (L - 6)), i.e. at
    0, 2, 10 for L = 16 and 0, 6, 26 for L = 32; the reader sees it before L / 2 only, so
    accuracy is 1, 1, 0 at both lengths, one whole-sequence row per (length, depth)."""
    cfg = _cfg()
    task = task_from_config(cfg.task)
    rows = evaluate_model(
        FirstHalfReader(40), task, cfg, step=0, scalings=[Scaling(NO_SCALING, 1.0)]
    )
    at_depth = [r for r in rows if r.get("depth") is not None]
    assert all(r["position_bucket"] is None for r in at_depth)
    table = (
        pl.DataFrame(at_depth).pivot(on="depth", index="length", values="accuracy").sort("length")
    )
    assert table.rows() == [(16, 1.0, 1.0, 0.0), (32, 1.0, 1.0, 0.0)]
    assert [r["exact_match"] for r in at_depth] == [1.0, 1.0, 0.0] * 2
    # the task's own rows (random depth) are there as before, and the summary reads only them
    plain = [r for r in rows if "depth" not in r]
    assert len(plain) == 2 * (1 + cfg.eval.position_buckets)
    summary = extrapolation_summary(rows, 16, 0.9)
    assert len(summary) == 1


def test_depths_are_checked_and_keyed() -> None:
    """Depths in [0, 1], distinct, for a task with a depth only; they key the evaluation
    stages, and a trial without them keeps the stage names it had."""
    with pytest.raises(ConfigError, match=r"eval.depths\[1\]: must be in \[0, 1\]"):
        _cfg(**{"eval.depths": (0.5, 1.5)})
    with pytest.raises(ConfigError, match=r"eval\.depths: listed twice"):
        _cfg(**{"eval.depths": (0.5, 0.5)})
    plain = tiny_trial("none", task="copy", vocab=40, task_params=())
    with pytest.raises(ConfigError, match=r"eval\.depths: task .copy. has no needle depth"):
        validate(replace(plain, **{"eval.depths": (0.5,)}))
    without = _cfg(**{"eval.depths": ()})
    assert eval_stages(_cfg())[0].name != eval_stages(without)[0].name
    assert reading(_cfg())["depths"] == [0.0, 0.25, 1.0]
    assert "depths" not in reading(without)  # stages keyed before the field keep their names

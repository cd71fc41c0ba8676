"""Evaluation rows, per-position buckets, scalings, summary and table."""

import dataclasses
import itertools
import math
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.config import replace, to_dict, validate
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import with_scaling
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.sweep.stages import MODEL_FILE, run_stage
from rope_lab.tasks import Batch, task_from_config
from rope_lab.trial import evaluate, finetune
from rope_lab.trial.checkpoint import save_model
from rope_lab.trial.evaluate import (
    NO_SCALING,
    Scaling,
    evaluate_model,
    extrapolation_summary,
    format_table,
    scalings_for,
)
from rope_lab.trial.finetune import finetune_and_evaluate
from rope_lab.trial.objective import token_losses
from rope_lab.trial.scaling_plan import eval_scaling
from rope_lab.trial.stage_plan import scaling_stage_name
from rope_lab.trial.train import train
from tests.helpers import tiny_trial

COLUMNS = {
    "step",
    "method",
    "factor",
    "finetune_steps",
    "length",
    "loss",
    "perplexity",
    "accuracy",
    "exact_match",
    "position_bucket",
    "sequences_per_forward",
    "bits_per_byte",  # None: passkey is not text
}


def test_scalings_rope_and_others():
    cfg = tiny_trial("rope")
    names = [(s.method, s.factor) for s in scalings_for(cfg)]
    assert names == [("default", 1.0), ("linear", 2.0), ("dynamic", 2.0)]
    assert [(s.method, s.factor) for s in scalings_for(tiny_trial("alibi"))] == [("none", 1.0)]


def test_rows_have_all_columns_and_consistent_buckets():
    cfg = tiny_trial("rope")
    model = make_model(cfg)
    rows = evaluate_model(model, task_from_config(cfg.task), cfg, step=0)
    assert all(set(r) == COLUMNS for r in rows)
    whole = [r for r in rows if r["position_bucket"] is None]
    assert {(r["method"], r["length"]) for r in whole} == {
        (m, n) for m in ("default", "linear", "dynamic") for n in (8, 16, 32)
    }
    for r in whole:
        assert math.isclose(r["perplexity"], math.exp(r["loss"]), rel_tol=1e-9)
        assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["exact_match"] <= 1.0
    by = {(r["method"], r["length"]): r for r in whole}
    # passkey scores the last needle_length=2 positions: only the last bucket has scored tokens
    buckets = [
        r
        for r in rows
        if r["method"] == "default" and r["length"] == 16 and r["position_bucket"] is not None
    ]
    assert [b["position_bucket"] for b in buckets] == [0, 8]
    assert math.isnan(buckets[0]["loss"]) and buckets[1]["loss"] == pytest.approx(
        by[("default", 16)]["loss"]
    )


SHORT_AND_LONG = {"eval.length_multipliers": (0.5, 2.0)}  # fewer programs to compile


@pytest.mark.parametrize(
    ("kind", "changes", "lengths"),
    [
        ("rope", {}, {8, 16, 32}),  # scalings default, linear, dynamic (frequencies at each L)
        ("alibi", SHORT_AND_LONG, {8, 32}),
        ("learned", SHORT_AND_LONG, {8, 32}),
    ],
)
def test_padding_to_the_longest_length_leaves_rows_unchanged(kind, changes, lengths):
    cfg = replace(tiny_trial(kind), **changes)
    model, task = make_model(cfg), task_from_config(cfg.task)
    plain = evaluate_model(model, task, cfg, step=0)
    padded = evaluate_model(model, task, replace(cfg, **{"eval.pad_to_longest": True}), step=0)
    assert len(padded) == len(plain) and {r["length"] for r in plain} == lengths
    for a, b in zip(plain, padded, strict=True):
        assert set(a) == set(b) == COLUMNS
        for col in ("step", "method", "factor", "finetune_steps", "length", "position_bucket"):
            assert a[col] == b[col]
        for col in ("loss", "accuracy", "exact_match"):
            assert b[col] == pytest.approx(a[col], abs=1e-5, nan_ok=True)
        assert b["perplexity"] == pytest.approx(a["perplexity"], rel=1e-5, nan_ok=True)


def test_padded_forward_is_traced_once_for_every_length_and_scaling(monkeypatch):
    # batch_size 3 is used by no other test: the forward program is not yet in the jit cache
    cfg = replace(
        tiny_trial("rope"), **{"eval.pad_to_longest": True, "eval.batch_size": 3, "eval.batches": 2}
    )
    traces = []

    def counted(*args):
        traces.append(args[2].shape)  # runs once per trace of the forward program
        return token_losses(*args)

    monkeypatch.setattr(evaluate, "token_losses", counted)
    rows = evaluate_model(make_model(cfg), task_from_config(cfg.task), cfg, step=0)
    assert {(r["method"], r["length"]) for r in rows} == {
        (m, n) for m in ("default", "linear", "dynamic") for n in (8, 16, 32)
    }
    assert traces == [(3, 32)]


def _row(method, length, acc, ft=0):
    return {
        "method": method,
        "factor": 2.0,
        "finetune_steps": ft,
        "length": length,
        "accuracy": acc,
        "position_bucket": None,
    }


def test_extrapolation_summary_known_answers():
    rows = [
        _row("a", n, acc) for n, acc in [(8, 0.5), (16, 1.0), (32, 0.95), (64, 0.2), (128, 0.99)]
    ]
    rows += [_row("b", n, acc) for n, acc in [(8, 1.0), (16, 0.8), (32, 0.5)]]
    rows += [_row("c", n, 1.0) for n in (8, 32)]  # no L_train row
    summary = {s["method"]: s for s in extrapolation_summary(rows, 16, 0.9)}
    assert summary["a"]["longest_length"] == 32  # stops at the first failure past L_train
    assert summary["b"]["longest_length"] == 16
    assert summary["c"]["longest_length"] is None


def test_finetune_only_for_rope_with_steps():
    assert finetune_and_evaluate(None, None, tiny_trial("alibi"), step=0) == []
    assert finetune_and_evaluate(None, None, tiny_trial("rope"), step=0) == []


def test_format_table():
    rows = [_row("a", 16, 0.5), _row("a", 32, 0.25)]
    text = format_table(rows)
    assert "16" in text and "32" in text and "0.500" in text and "0.250" in text


# ------------------------------------------------------------------- metrics: known answers


class _FixedLogits(eqx.Module):
    """A stand-in model: logits (B, P, V) fixed in advance, cut to the input's length."""

    logits: jax.Array

    def __call__(self, tokens, positions):
        return self.logits[:, : tokens.shape[-1]]


@dataclasses.dataclass(frozen=True)
class _FixedTask:
    """A stand-in task whose every batch has these targets and mask (tokens all 0)."""

    targets: tuple
    mask: tuple
    nbytes: tuple | None = None  # bytes per token id: a text task (bits per byte)

    def operands(self, split="train"):
        return ()

    def token_bytes(self):
        return None if self.nbytes is None else np.asarray(self.nbytes)

    def sample_from(self, operands, batch_size, length, *, key):
        targets = jnp.asarray(self.targets, jnp.int32)
        return Batch(jnp.zeros_like(targets), targets, jnp.asarray(self.mask))


def _logits_predicting(predicted, vocab, padded_length, seed):
    """Random logits (B, padded_length, V) whose argmax is `predicted` (B, L) on the first L."""
    rng = np.random.default_rng(seed)
    predicted = np.asarray(predicted)
    logits = rng.normal(size=(predicted.shape[0], padded_length, vocab))
    logits[:, : predicted.shape[1]] += 4.0 * np.eye(vocab)[predicted]
    return logits.astype(np.float32)


def _numpy_metrics(logits, targets, mask, edges):
    """Whole-sequence (loss, perplexity, accuracy, exact_match) and per-bucket (loss,
    perplexity, accuracy) from their definitions, in float64 NumPy; NaN where nothing is
    scored. logits (B, L, V), targets and mask (B, L); buckets [edges[i], edges[i+1])."""
    logits = np.asarray(logits, np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    right = logits.argmax(axis=-1) == targets

    def part(cols):
        m = mask[:, cols]
        if not m.any():
            return (math.nan, math.nan, math.nan)
        loss = float(nll[:, cols][m].mean())
        return (loss, math.exp(loss), float(right[:, cols][m].mean()))

    scored = [i for i in range(len(mask)) if mask[i].any()]
    exact = np.mean([right[i][mask[i]].all() for i in scored]) if scored else 0.0
    whole = (*part(slice(None)), float(exact))
    return whole, [part(slice(a, b)) for a, b in itertools.pairwise(edges)]


def _assert_rows_are(rows, whole, buckets, bucket_starts):
    """Rows of one length: the whole-sequence row, then one per bucket, with these metrics."""
    assert [r["position_bucket"] for r in rows] == [None, *bucket_starts]
    names = ("loss", "perplexity", "accuracy", "exact_match")
    assert tuple(rows[0][c] for c in names) == pytest.approx(whole, rel=1e-5, abs=1e-6, nan_ok=True)
    for row, expected in zip(rows[1:], buckets, strict=True):
        assert row["exact_match"] is None
        assert tuple(row[c] for c in names[:3]) == pytest.approx(
            expected, rel=1e-5, abs=1e-6, nan_ok=True
        )


# (B, L) = (3, 4): scored tokens 4, of them right 3; sequence 0 fully right, sequence 1 not,
# sequence 2 has nothing scored. Unscored slots are wrong in 0 and 2 and right in 1, so any
# metric counting them, or counting sequence 2, changes.
TARGETS = ((0, 1, 2, 0), (2, 2, 1, 0), (1, 1, 1, 1))
MASK = ((False, True, True, False), (False, False, True, True), (False,) * 4)
PREDICTED = ((1, 1, 2, 2), (2, 0, 1, 1), (0, 0, 0, 0))
EDGES = (0, 1, 2, 4)  # 3 buckets of 4 positions: floor(i * 4 / 3)


def _metrics_cfg(**changes):
    """A trial evaluated at length 4 (and 8) with 3 position buckets of batches of 3."""
    return replace(
        tiny_trial("none", length=4),
        **{
            "eval.length_multipliers": (1.0, 2.0),
            "eval.batch_size": 3,
            "eval.position_buckets": 3,
            **changes,
        },
    )


@pytest.mark.parametrize("pad", [False, True])
def test_metrics_known_answers(pad):
    cfg = _metrics_cfg(**{"eval.batches": 2, "eval.pad_to_longest": pad})
    logits = _logits_predicting(PREDICTED, vocab=3, padded_length=8, seed=0)
    rows = evaluate_model(
        _FixedLogits(jnp.asarray(logits)), _FixedTask(TARGETS, MASK), cfg, step=0, lengths=[4]
    )
    whole, buckets = _numpy_metrics(logits[:, :4], np.array(TARGETS), np.array(MASK), EDGES)
    assert whole[2:] == (0.75, 0.5)  # accuracy 3/4, exact match 1/2
    assert [b[2] for b in buckets] == pytest.approx([math.nan, 1.0, 2 / 3], nan_ok=True)
    _assert_rows_are(rows, whole, buckets, [0, 1, 2])


@pytest.mark.parametrize("pad", [False, True])
def test_bits_per_byte_is_the_loss_in_bits_over_the_scored_bytes(pad):
    """Tokens 0, 1, 2 stand for 1, 3 and 2 bytes of text. Hand-chosen logits give each scored
    target a known loss; bits per byte = sum of those losses / sum of the targets' bytes / ln 2,
    per row and per position bucket (a synthetic task's rows have None)."""
    cfg = _metrics_cfg(**{"eval.batches": 1, "eval.pad_to_longest": pad})
    # logits (3, 8, 3): target probability p at every position, the rest shared equally
    p = np.array([[0.5, 0.25, 0.8, 0.1], [0.3, 0.6, 0.9, 0.2], [0.4] * 4])
    logits = np.full((3, 8, 3), np.log(0.1), np.float64)
    for b, t in itertools.product(range(3), range(4)):
        target = TARGETS[b][t]
        logits[b, t] = np.log((1 - p[b, t]) / 2)
        logits[b, t, target] = np.log(p[b, t])
    model = _FixedLogits(jnp.asarray(logits, jnp.float32))
    task = _FixedTask(TARGETS, MASK, nbytes=(1, 3, 2))
    rows = evaluate_model(model, task, cfg, step=0, lengths=[4])
    # scored: (0, 1) target 1, (0, 2) target 2, (1, 2) target 1, (1, 3) target 0
    nats = -np.log([0.25, 0.8, 0.9, 0.2])
    nbytes = np.array([3, 2, 3, 1])
    assert rows[0]["bits_per_byte"] == pytest.approx(nats.sum() / nbytes.sum() / math.log(2))
    assert rows[0]["loss"] == pytest.approx(nats.mean(), rel=1e-6)
    buckets = {r["position_bucket"]: r["bits_per_byte"] for r in rows[1:]}
    assert math.isnan(buckets[0])  # nothing scored at position 0
    assert buckets[1] == pytest.approx(nats[0] / 3 / math.log(2), rel=1e-6)
    assert buckets[2] == pytest.approx(nats[1:].sum() / 6 / math.log(2), rel=1e-6)
    plain = evaluate_model(model, _FixedTask(TARGETS, MASK), cfg, step=0, lengths=[4])
    assert all(r["bits_per_byte"] is None for r in plain)


@given(seed=st.integers(0, 2**32 - 1))
def test_metrics_pool_every_batch(seed):
    """Over several batches every metric is one ratio over all scored tokens (exact match: over
    all sequences with a scored token), not a mean of per-batch values."""
    rng = np.random.default_rng(seed)
    shape = (2, 3, 4)  # batches, B, L
    targets = rng.integers(0, 3, shape)
    mask = rng.random(shape) < 0.5
    predicted = np.where(rng.random(shape) < 0.7, targets, rng.integers(0, 3, shape))
    logits = [_logits_predicting(predicted[b], 3, 4, seed + b) for b in range(2)]
    calls = []

    def batch_sums(model, task, operands, key, batch_size, length, cfg):
        b = len(calls)
        calls.append(b)
        batch = Batch(jnp.zeros((3, 4), jnp.int32), jnp.asarray(targets[b]), jnp.asarray(mask[b]))
        return evaluate._sums(_FixedLogits(jnp.asarray(logits[b])), batch, jnp.arange(4))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluate, "_batch_sums", batch_sums)
        task = _FixedTask(TARGETS, MASK)  # its batches are replaced by the drawn ones
        rows = evaluate_model(None, task, _metrics_cfg(**{"eval.batches": 2}), step=0, lengths=[4])
    assert calls == [0, 1]
    whole, buckets = _numpy_metrics(
        np.concatenate(logits), targets.reshape(6, 4), mask.reshape(6, 4), EDGES
    )
    _assert_rows_are(rows, whole, buckets, [0, 1, 2])


# --------------------------------------------------------------- dynamic NTK, fine-tuning


def _assert_same_metrics(actual, expected):
    """Two row lists of the same lengths and buckets, in order, with equal metrics."""
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected, strict=True):
        assert (a["length"], a["position_bucket"]) == (b["length"], b["position_bucket"])
        if b["exact_match"] is None:
            assert a["exact_match"] is None
        else:
            assert a["exact_match"] == pytest.approx(b["exact_match"], rel=1e-9)
        for col in ("loss", "perplexity", "accuracy"):
            assert a[col] == pytest.approx(b[col], rel=1e-9, nan_ok=True), (col, a, b)


def _at(rows, length, **where):
    """The rows of one length (whole first, then buckets) matching `where`."""
    return [r for r in rows if r["length"] == length and all(r[k] == v for k, v in where.items())]


def test_dynamic_ntk_is_rebuilt_at_every_length():
    """Each length's dynamic rows are those of the model with frequencies built at that
    length: the default rows up to L_train, others beyond (tiny_trial evaluates 8, 16, 32)."""
    cfg = tiny_trial("rope")
    model, task = make_model(cfg), task_from_config(cfg.task)
    rows = evaluate_model(model, task, cfg, step=0)
    for n in cfg.eval_lengths:
        at_n = with_scaling(model, "dynamic", 2.0, {}, seq_len=n)
        direct = evaluate_model(
            at_n, task, cfg, step=0, scalings=[Scaling(NO_SCALING, 1.0)], lengths=[n]
        )
        dynamic = _at(rows, n, method="dynamic")
        _assert_same_metrics(dynamic, direct)
        default = _at(rows, n, method="default")
        if n <= cfg.train.length:
            _assert_same_metrics(dynamic, default)
        else:
            assert abs(dynamic[0]["loss"] - default[0]["loss"]) > 1e-4


FT_STEPS = 3
FT_LR = 1e-2


def _finetune_spy(cfg, base, results, canned=None):
    """A stand-in for `train` in rope_lab.trial.evaluate that checks it is asked to fine-tune `base`
    under linear x2 for FT_STEPS steps at 2 x L_train, lr FT_LR, data seed train.seed + 10000;
    it trains (or returns `canned`) and appends the TrainResult to `results`."""

    def spy(cfg_, *, model, length, steps, lr, data_seed):
        target = 2 * cfg.train.length
        assert cfg_ == cfg
        assert (length, steps, lr, data_seed) == (target, FT_STEPS, FT_LR, cfg.train.seed + 10_000)
        scaled = with_scaling(base, "linear", 2.0, {}, seq_len=target)
        for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(scaled), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        if canned is None:
            out = train(cfg_, model=model, length=length, steps=steps, lr=lr, data_seed=data_seed)
        else:
            out = canned
        results.append(out)
        return out

    return spy


@pytest.fixture(scope="module")
def finetuned():
    """A RoPE trial fine-tuned under linear x2 by `finetune_and_evaluate`: its config, base
    model, the code's rows, the fine-tuned TrainResult, and the rows of direct evaluations of
    the fine-tuned model and of the base model (zero-shot)."""
    cfg = replace(
        tiny_trial("rope"),
        **{"eval.finetune_steps": FT_STEPS, "eval.finetune_lr": FT_LR, "eval.methods": ("linear",)},
    )
    # not the trial's own initialisation: a stage that fine-tunes or evaluates anything but
    # the model it loads gives other rows
    model, task = make_model(cfg, key=jax.random.PRNGKey(1)), task_from_config(cfg.task)
    step, results = cfg.train.steps, []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(finetune, "train", _finetune_spy(cfg, model, results))
        rows = finetune_and_evaluate(model, task, cfg, step=step)
    (tuned,) = results
    scalings = [Scaling("linear", 2.0)]
    return {
        "cfg": cfg,
        "model": model,
        "rows": rows,
        "result": tuned,
        "tuned": evaluate_model(
            tuned.model, task, cfg, step=step, scalings=scalings, finetune_steps=FT_STEPS
        ),
        "zero_shot": evaluate_model(model, task, cfg, step=step, scalings=scalings),
    }


def _check_finetuned_rows(rows, finetuned):
    """`rows` are the direct evaluation of the fine-tuned model and differ from zero-shot."""
    cfg = finetuned["cfg"]
    assert {(r["method"], r["factor"], r["finetune_steps"], r["step"]) for r in rows} == {
        ("linear", 2.0, FT_STEPS, cfg.train.steps)
    }
    _assert_same_metrics(rows, finetuned["tuned"])
    for n in cfg.eval_lengths:
        tuned, zero = _at(rows, n, position_bucket=None), _at(finetuned["zero_shot"], n)
        assert abs(tuned[0]["loss"] - zero[0]["loss"]) > 1e-3


def test_finetuned_rows_evaluate_the_finetuned_model(finetuned):
    _check_finetuned_rows(finetuned["rows"], finetuned)


def test_scaling_stage_rows_are_zero_shot_and_finetuned(tmp_path, monkeypatch, finetuned):
    """The stage fine-tunes the saved base model (the fine-tuning itself is the one checked
    above, returned here without training again) and stores both kinds of rows."""
    cfg = finetuned["cfg"]
    folder = trial_dir(tmp_path, cfg.trial_id)
    save_model(folder / MODEL_FILE, finetuned["model"])
    results = []
    spy = _finetune_spy(cfg, finetuned["model"], results, canned=finetuned["result"])
    monkeypatch.setattr(finetune, "train", spy)
    stage = scaling_stage_name(cfg, eval_scaling(cfg, "linear", 2.0))
    result = run_stage(to_dict(cfg), str(tmp_path), stage)
    assert result["status"] == "done", result
    assert len(results) == 1
    rows = read_trial_table(folder, "eval").sort("finetune_steps", "length", "position_bucket")
    rows = rows.to_dicts()
    ft = [r for r in rows if r["finetune_steps"]]
    zero = [r for r in rows if not r["finetune_steps"]]
    assert {(r["method"], r["factor"]) for r in zero} == {("linear", 2.0)}
    _assert_same_metrics(zero, finetuned["zero_shot"])
    _check_finetuned_rows(ft, finetuned)


@pytest.mark.parametrize(
    ("methods", "factors", "expected"),
    [
        ((), (), {("linear", 2.0), ("linear", 4.0), ("default", 2.0), ("default", 4.0)}),
        (("linear", "default"), (4.0,), {("linear", 4.0), ("default", 4.0)}),
        (("default",), (), {("default", 2.0), ("default", 4.0)}),
    ],
)
def test_finetune_only_the_chosen_methods_and_factors(monkeypatch, methods, factors, expected):
    """`eval.finetune_methods` / `finetune_factors` pick the stages that fine-tune (all when
    empty); `default` at factor s fine-tunes unscaled RoPE at s x L_train (the control)."""
    from rope_lab.trial.scaling_plan import finetune_scalings

    cfg = validate(
        replace(
            tiny_trial("rope"),
            **{
                "eval.methods": ("linear", "default"),
                "eval.factors": (2.0, 4.0),
                "eval.finetune_steps": 1,
                "eval.finetune_methods": methods,
                "eval.finetune_factors": factors,
            },
        )
    )
    assert {(s.method, s.factor) for s in finetune_scalings(cfg)} == expected
    asked = []

    def fake_train(cfg_, *, model, length, steps, lr, data_seed):
        asked.append(length)
        return types.SimpleNamespace(model=model)

    def fake_eval(model, task, cfg_, *, step, scalings, finetune_steps=0):
        return [{"method": s.method, "factor": s.factor} for s in scalings]

    monkeypatch.setattr(finetune, "train", fake_train)
    monkeypatch.setattr(finetune, "evaluate_model", fake_eval)
    model = make_model(cfg)
    rows = []
    for method in ("linear", "default"):
        for factor in (2.0, 4.0):
            rows += finetune_and_evaluate(
                model, None, cfg, step=0, scalings=[Scaling(method, factor)]
            )
    assert {(r["method"], r["factor"]) for r in rows} == expected
    assert sorted(asked) == sorted(round(f * cfg.train.length) for _, f in expected)


def test_unscaled_rope_stages_exist_only_to_fine_tune(tmp_path, monkeypatch):
    """`default` at factor s on a model trained unscaled changes nothing zero-shot: it is a stage
    only where it is fine-tuned (the control), and that stage writes fine-tuned rows only."""
    from rope_lab.trial.scaling_plan import scaling_stages

    cfg = validate(
        replace(
            tiny_trial("rope"),
            **{
                "eval.methods": ("linear", "default"),
                "eval.factors": (2.0, 4.0),
                "eval.finetune_steps": 1,
                "eval.finetune_methods": ("default",),
                "eval.finetune_factors": (2.0,),
            },
        )
    )
    assert scaling_stages(cfg) == [("linear", 2.0), ("linear", 4.0), ("default", 2.0)]
    zero_shot = replace(cfg, **{"eval.finetune_steps": 0})
    assert scaling_stages(zero_shot) == [("linear", 2.0), ("linear", 4.0)]

    folder = trial_dir(tmp_path, cfg.trial_id)
    save_model(folder / MODEL_FILE, make_model(cfg))
    monkeypatch.setattr(
        finetune, "train", lambda cfg_, *, model, **kw: types.SimpleNamespace(model=model)
    )
    stage = scaling_stage_name(cfg, eval_scaling(cfg, "default", 2.0))
    assert run_stage(to_dict(cfg), str(tmp_path), stage)["status"] == "done"
    rows = read_trial_table(folder, "eval")
    assert set(rows.get_column("finetune_steps").to_list()) == {1}
    assert set(zip(rows["method"], rows["factor"], strict=True)) == {("default", 2.0)}


@pytest.mark.slow  # ~22 s a protocol
@pytest.mark.parametrize(("protocol", "stride"), [("nonoverlapping", None), ("sliding", 5)])
def test_text_protocols_score_the_whole_held_out_text(tmp_path, protocol, stride):
    """Under Press et al.'s protocols each length reads the same held-out bytes: the summed
    loss equals the model's per-token losses over the windows built by hand from the split,
    on the scored positions only (nonoverlapping: all; sliding: the first window's all, then
    each window's last `stride`), with `eval.pad_to_longest` on or off."""
    from rope_lab.tasks.text_lm import text_windows
    from rope_lab.trial.evaluate import evaluate_length

    path = tmp_path / "corpus.txt"
    path.write_bytes(np.random.default_rng(3).integers(0, 256, 700, dtype=np.uint8).tobytes())
    cfg = validate(
        replace(
            tiny_trial("alibi", task="lm_text", vocab=256, task_params=(("path", str(path)),)),
            **{"eval.text_protocol": protocol, "eval.text_stride": stride, "eval.batch_size": 3},
        )
    )
    task = task_from_config(cfg.task)
    model = make_model(cfg)
    held_out = np.asarray(task.data[630:])  # the last 10% of 700 bytes
    for length in (8, 16, 32):
        for padded in (False, True):
            run = replace(cfg, **{"eval.pad_to_longest": padded})
            sums = evaluate_length(model, task, run, length, key=jax.random.PRNGKey(0))
            step = min(stride or cfg.train.length, length)
            tokens, targets, mask = text_windows(held_out, length, protocol, step)
            batch = Batch(jnp.asarray(tokens), jnp.asarray(targets), jnp.asarray(mask))
            positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
            losses, _ = token_losses(model, batch, positions)
            expected = np.asarray(losses, np.float64)[mask]
            assert sums["count"].sum() == mask.sum() == expected.size
            np.testing.assert_allclose(sums["loss_sum"].sum(), expected.sum(), rtol=1e-5)
            np.testing.assert_array_equal(sums["count"], mask.sum(axis=0))


def test_text_protocols_only_for_text(tmp_path):
    from rope_lab.config import ConfigError

    with pytest.raises(ConfigError, match=r"eval.text_protocol: 'sliding' reads windows of a"):
        validate(replace(tiny_trial("rope"), **{"eval.text_protocol": "sliding"}))
    with pytest.raises(ConfigError, match=r"eval.text_protocol: unknown value 'overlap'"):
        validate(replace(tiny_trial("rope"), **{"eval.text_protocol": "overlap"}))
    with pytest.raises(ConfigError, match=r"eval.text_stride: only the 'sliding' protocol"):
        validate(replace(tiny_trial("rope"), **{"eval.text_stride": 4}))

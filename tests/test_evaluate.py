"""Evaluation rows, per-position buckets, scalings, summary and table."""

import math

import pytest

from rope_lab import evaluate
from rope_lab.config import replace
from rope_lab.evaluate import (
    evaluate_model,
    extrapolation_summary,
    finetune_and_evaluate,
    format_table,
    scalings_for,
)
from rope_lab.train import make_model, make_task_from, token_losses
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
}


def test_scalings_rope_and_others():
    cfg = tiny_trial("rope")
    names = [(s.method, s.factor) for s in scalings_for(cfg)]
    assert names == [("default", 1.0), ("linear", 2.0), ("dynamic", 2.0)]
    assert [(s.method, s.factor) for s in scalings_for(tiny_trial("alibi"))] == [("none", 1.0)]


def test_rows_have_all_columns_and_consistent_buckets():
    cfg = tiny_trial("rope")
    model = make_model(cfg)
    rows = evaluate_model(model, make_task_from(cfg), cfg, step=0)
    assert all(set(r) == COLUMNS for r in rows)
    whole = [r for r in rows if r["position_bucket"] is None]
    assert {(r["method"], r["length"]) for r in whole} == {
        (m, n) for m in ("default", "linear", "dynamic") for n in (8, 16, 32)
    }
    for r in whole:
        assert math.isclose(r["perplexity"], math.exp(r["loss"]), rel_tol=1e-9)
        assert 0.0 <= r["accuracy"] <= 1.0 and 0.0 <= r["exact_match"] <= 1.0
    # dynamic scaling equals the base model at and below L_train, on identical batches
    by = {(r["method"], r["length"]): r for r in whole}
    for n in (8, 16):
        assert by[("dynamic", n)]["loss"] == by[("default", n)]["loss"]
    assert by[("dynamic", 32)]["loss"] != by[("default", 32)]["loss"]
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
    model, task = make_model(cfg), make_task_from(cfg)
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
    rows = evaluate_model(make_model(cfg), make_task_from(cfg), cfg, step=0)
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


def test_finetune_rows_are_tagged():
    from rope_lab.config import replace

    cfg = replace(tiny_trial("rope"), **{"eval.finetune_steps": 3, "eval.methods": ("linear",)})
    rows = finetune_and_evaluate(make_model(cfg), make_task_from(cfg), cfg, step=20)
    assert {(r["method"], r["finetune_steps"], r["step"]) for r in rows} == {("linear", 3, 20)}


def test_format_table():
    rows = [_row("a", 16, 0.5), _row("a", 32, 0.25)]
    text = format_table(rows)
    assert "16" in text and "32" in text and "0.500" in text and "0.250" in text

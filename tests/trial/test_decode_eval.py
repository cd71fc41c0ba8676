"""Decode-time evaluation: prompts cut at the answer, answers generated greedily, scored."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rope_lab.config import ConfigError, replace, validate
from rope_lab.model.factory import make_model
from rope_lab.registry import TASKS
from rope_lab.tasks import task_from_config
from rope_lab.tasks.sampling import sample_batch
from rope_lab.trial.decode_eval import (
    DECODE,
    answer_length,
    compiled_programs,
    decode_rows,
    decode_scores,
)
from rope_lab.trial.scaling_plan import Scaling
from tests.helpers import tiny_trial
from tests.model.test_decode import jittered
from tests.tasks.common import task_module


def test_answer_length_is_the_common_scored_suffix():
    mask = np.zeros((3, 8), bool)
    mask[:, 5:] = True
    assert answer_length(mask) == 3
    mask[1, 4] = True  # one row's answer is longer
    with pytest.raises(ValueError, match="one answer at its end"):
        answer_length(mask)
    gap = np.zeros((2, 8), bool)
    gap[:, [5, 7]] = True
    with pytest.raises(ValueError, match="one answer at its end"):
        answer_length(gap)


def _greedy_by_hand(model, prompt, steps):
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(np.asarray(model(jnp.asarray(seq))[-1]).argmax()))
    return np.asarray(seq[len(prompt) :])


@pytest.mark.parametrize("task", [n for n in TASKS.names() if TASKS[n].answer_at_end])
def test_scores_are_greedy_answers_compared_with_the_targets(task, tmp_path):
    """Each sequence's prompt ends at the token that predicts the first answer token; the
    answer generated from it equals greedy decoding by full forwards, and the scores count
    its tokens against the targets. Every task with one answer at its end, at the small
    parameters of its test module."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(32, 127)) * 40)
    params = tuple(task_module(task).tiny_params(str(corpus)).items())
    cfg = validate(tiny_trial("rope", width=16, head_dim=4, task=task, task_params=params))
    model = jittered(make_model(cfg))
    task_ = task_from_config(cfg.task)
    batch = sample_batch(task_, 4, 16, split="eval", key=jax.random.PRNGKey(3))
    tokens, targets, mask = (np.array(x) for x in (batch.tokens, batch.targets, batch.mask))
    m = answer_length(mask)
    # make some answers right: sequence 0's targets become the model's own greedy answer
    own = _greedy_by_hand(model, tokens[0, : 16 - m + 1], m)
    targets[0, 16 - m :] = own
    exact, accuracy = decode_scores(
        model, tokens, targets, mask, protocol="prefill_fixed", scaling=None
    )
    for i in range(4):
        answer = _greedy_by_hand(model, tokens[i, : 16 - m + 1], m)
        right = answer == targets[i, 16 - m :]
        assert exact[i] == right.all() and accuracy[i] == pytest.approx(right.mean())
    assert exact[0] and accuracy[0] == 1.0


def test_decode_exact_match_equals_teacher_forced_exact_match():
    """A whole answer is right under greedy decoding exactly when every answer token is the
    argmax under teacher forcing (decoding feeds back the right tokens until the first error),
    sequence by sequence."""
    cfg = validate(tiny_trial("alibi", width=16, head_dim=4))
    model = jittered(make_model(cfg), scale=0.05)
    task = task_from_config(cfg.task)
    batch = sample_batch(task, 16, 16, split="eval", key=jax.random.PRNGKey(5))
    tokens, targets, mask = (np.array(x) for x in (batch.tokens, batch.targets, batch.mask))
    m = answer_length(mask)
    for i in range(0, 16, 3):  # some sequences whose answer is the model's own greedy one
        answer = _greedy_by_hand(model, tokens[i, : 16 - m + 1], m)
        targets[i, 16 - m :] = answer
        tokens[i, 16 - m + 1 :] = answer[:-1]  # the answer is fed as input under teacher forcing
    predicted = np.asarray(model(jnp.asarray(tokens))).argmax(-1)[:, 16 - m :]
    exact, _ = decode_scores(model, tokens, targets, mask, protocol="prefill_fixed", scaling=None)
    forced = (predicted == targets[:, 16 - m :]).all(axis=1)
    np.testing.assert_array_equal(exact, forced)
    assert forced.sum() >= 6


@pytest.mark.slow  # ~19 s on 2 cores
def test_rows_carry_the_mode_and_protocol():
    cfg = validate(
        replace(
            tiny_trial("rope", width=16, head_dim=4),
            **{"eval.batches": 1, "eval.batch_size": 2, "eval.length_multipliers": (1.0, 2.0)},
        )
    )
    model = make_model(cfg)
    protocols = ("prefill_fixed", "per_step_stale")
    task = task_from_config(cfg.task)
    scaling = Scaling("dynamic", 2.0)
    rows = decode_rows(model, task, cfg, step=5, scaling=scaling, protocols=protocols)
    want = [(length, p) for length in (16, 32) for p in protocols]
    assert [(r["length"], r["protocol"]) for r in rows] == want
    yarn = decode_rows(model, task, cfg, step=5, scaling=Scaling("yarn", 2.0), protocols=protocols)
    assert [r["protocol"] for r in yarn] == ["any", "any"]  # one answer under every protocol
    assert {r["mode"] for r in rows} == {DECODE} and {r["method"] for r in rows} == {"dynamic"}
    assert all(
        0.0 <= r["exact_match"] <= r["accuracy"] + 1e-12 or r["exact_match"] == 0 for r in rows
    )


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"eval.decode.protocols": ("per_step",)},
            r"eval.decode.protocols\[0\]: unknown protocol 'per_step'; allowed: prefill_fixed",
        ),
        ({"eval.decode.protocols": ("per_step_stale", "per_step_stale")}, "listed twice"),
    ],
)
def test_bad_decode_settings_name_the_key(changes, match):
    with pytest.raises(ConfigError, match=match):
        validate(replace(tiny_trial(), **changes))


def test_decode_needs_an_answer_at_the_end():
    cfg = replace(
        tiny_trial(task="flipflop", task_params=()), **{"eval.decode.protocols": ("prefill_fixed",)}
    )
    with pytest.raises(
        ConfigError, match=r"task 'flipflop' has no single answer.*runs on passkey, copy"
    ):
        validate(cfg)


@pytest.mark.slow  # ~18 s on 2 cores
def test_decode_reads_the_sequences_teacher_forcing_reads():
    """Under a scaling that does not depend on the length the rows are decoded once (protocol
    `any`), from the same sequences as `evaluate_model`: the exact match of each length equals
    the teacher-forced one, the whole answer being right under greedy decoding exactly when
    it is under teacher forcing."""
    from rope_lab.trial.decode_eval import ANY_PROTOCOL
    from rope_lab.trial.evaluate import evaluate_model
    from rope_lab.trial.train import train

    cfg = validate(
        replace(
            tiny_trial("alibi", width=32, head_dim=8, steps=150),
            **{"eval.batches": 2, "eval.batch_size": 16, "eval.length_multipliers": (1.0, 2.0)},
        )
    )
    model = train(cfg).model
    task = task_from_config(cfg.task)
    forced = evaluate_model(model, task, cfg, step=0)
    decoded = decode_rows(model, task, cfg, step=0, scaling=Scaling("none", 1.0),
                          protocols=("prefill_fixed", "per_step_stale"))  # fmt: skip
    assert [(r["length"], r["protocol"]) for r in decoded] == [
        (16, ANY_PROTOCOL),
        (32, ANY_PROTOCOL),
    ]
    whole = {r["length"]: r["exact_match"] for r in forced if r["position_bucket"] is None}
    for r in decoded:
        assert r["exact_match"] == pytest.approx(whole[r["length"]], abs=1e-12)
    assert max(whole.values()) > 0.1  # the model gets answers right: the equality has content


def test_max_new_tokens_scores_only_the_tokens_generated():
    """With a cap of one token the decoded answer is the teacher-forced argmax at the first
    answer position: exact match and accuracy both equal its correctness, per sequence; a cap
    of 0 is rejected naming the key."""
    cfg = validate(tiny_trial("rope", width=16, head_dim=4, task_params=(("needle_length", 3),)))
    model = jittered(make_model(cfg), scale=0.05)
    task = task_from_config(cfg.task)
    batch = sample_batch(task, 8, 16, split="eval", key=jax.random.PRNGKey(2))
    tokens, targets, mask = (np.array(x) for x in (batch.tokens, batch.targets, batch.mask))
    m = answer_length(mask)
    first = np.asarray(model(jnp.asarray(tokens))).argmax(-1)[:, 16 - m]
    targets[::2, 16 - m] = first[::2]  # half the sequences start their answer right
    exact, accuracy = decode_scores(
        model, tokens, targets, mask, protocol="prefill_fixed", scaling=None, max_new_tokens=1
    )
    right = first == targets[:, 16 - m]
    np.testing.assert_array_equal(exact, right)
    np.testing.assert_array_equal(accuracy, right.astype(float))
    assert right[::2].all()
    with pytest.raises(ConfigError, match=r"eval.decode.max_new_tokens: must be >= 1"):
        validate(replace(tiny_trial(), **{"eval.decode.max_new_tokens": 0}))


@pytest.mark.slow  # ~30-60 s on 2 cores: the reference compiles a program per length and protocol
def test_one_capacity_gives_the_rows_of_per_length_programs():
    """Every length decoded at the longest one's capacity and answer length (copy: the answer
    grows with the length) gives the rows of one program per length, under the model as
    trained and under dynamic NTK with each protocol, in 2 compiled programs (prefill_fixed,
    per_step_stale and the length-independent scaling share one; per_step_full has its own)
    instead of 2 lengths x (1 + 3)."""
    base = tiny_trial(
        "rope", width=16, head_dim=4, length=8, task="copy",
        task_params=(("segment_fraction", 0.5),),
    )  # fmt: skip
    cfg = validate(replace(base, **{"eval.batch_size": 4, "eval.length_multipliers": (1.0, 2.0)}))
    model = jittered(make_model(cfg))
    task = task_from_config(cfg.task)
    protocols = ("prefill_fixed", "per_step_stale", "per_step_full")
    scalings = (Scaling("default", 1.0), Scaling("dynamic", 2.0))
    before = compiled_programs()
    rows = {
        padded: [
            row
            for s in scalings
            for row in decode_rows(
                model, task, cfg, step=0, scaling=s, protocols=protocols, padded=padded
            )
        ]
        for padded in (False, True)
    }
    after = compiled_programs()
    assert rows[True] == rows[False]
    assert [r["length"] for r in rows[True]] == [8, 16] + [8] * 3 + [16] * 3
    assert 0 < sum(r["accuracy"] for r in rows[True]) < len(rows[True])  # not all right or wrong
    assert after["padded"] - before["padded"] == 2
    assert after["per_length"] - before["per_length"] == 2 * (1 + 3)

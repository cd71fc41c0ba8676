"""`train.match`: a lazy twin trained to a target in-range loss (`rope_lab.trial.match`): the
search's choice and record, its resume, the rich sibling it is matched against, the trial ids
and the refusals of bad settings."""

import dataclasses
import json
import math

import numpy as np
import pytest

from rope_lab.config import TrialConfig, from_dict, replace, to_dict, validate
from rope_lab.model.factory import make_model
from rope_lab.results import trial_dir
from rope_lab.results.scan import read_trial_table
from rope_lab.tasks import task_from_config
from rope_lab.trial import match
from rope_lab.trial.checkpoint import load_model, save_model
from rope_lab.trial.config import MatchConfig, rich_sibling
from rope_lab.trial.pipeline import MODEL_FILE, run_trial_stages
from rope_lab.trial.train import train
from rope_lab.typed import ConfigError
from tests.helpers import tiny_trial

FACTORS = (1.0, 3.0)


def twin(target=0.5, regime="lazy", **match_fields) -> TrialConfig:
    """A tiny passkey twin (width 16, L_train 8, 4 steps, measured every 2) searching 2 lr
    factors for up to 8 steps each."""
    cfg = tiny_trial("rope", width=16, depth=1, length=8, steps=4, regime="lazy")
    fields = {"target": target, "lr_factors": FACTORS, "max_steps_factor": 2.0, **match_fields}
    changes = {
        "eval.length_multipliers": (1.0, 2.0),
        "eval.methods": (),
        "ntk.enabled": False,
        "train.log_every": 2,
        "train.regime": regime,
        "train.match": MatchConfig(**fields),
    }
    return validate(replace(cfg, **changes))


@pytest.mark.slow
def test_an_unreachable_target_keeps_the_lowest_loss_after_every_factor(tmp_path):
    """Target 0.01 nats: both factors run all 8 steps (4 measurements each); the kept model is
    the lowest measured loss, `reached` is false, and the kept model's in-range loss is that
    number again (the model on disk is the one measured)."""
    cfg = twin(0.01)
    task = task_from_config(cfg.task)
    model, chosen, target = match.search(cfg, task, tmp_path)
    outcomes, _ = match._read(trial_dir(tmp_path, cfg.trial_id))
    assert target == 0.01 and not chosen.reached
    assert [o.factor for o in outcomes] == list(FACTORS)
    assert [[s for s, _ in o.measured] for o in outcomes] == [[2, 4, 6, 8]] * 2
    lowest = min(loss for o in outcomes for _, loss in o.measured)
    assert chosen.loss == lowest and chosen.lr == pytest.approx(chosen.factor * cfg.train.lr)
    assert match.in_range_loss(model, task, cfg) == pytest.approx(lowest, abs=1e-6)
    # resume: forget the second factor; the search runs it again to the same choice
    path = trial_dir(tmp_path, cfg.trial_id) / match.SEARCH_DIR / match.SEARCH_FILE
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "outcomes": data["outcomes"][:1]}))
    again, rechosen, _ = match.search(cfg, task, tmp_path)
    assert (rechosen.factor, rechosen.steps, rechosen.loss) == (
        chosen.factor,
        chosen.steps,
        chosen.loss,
    )
    assert match.in_range_loss(again, task, cfg) == pytest.approx(chosen.loss, abs=1e-6)


@pytest.mark.slow
def test_a_reachable_target_stops_at_the_first_measurement_within_tolerance(tmp_path):
    """The target is the first factor's loss at its second measurement (step 4; the first is
    higher): the search stops there, keeps that model within the tolerance, records factor 1's
    lr and runs no second factor."""
    probe = twin(0.01, lr_factors=(1.0,))
    task = task_from_config(probe.task)
    _, seen, _ = match.search(probe, task, tmp_path / "probe")
    losses = [loss for _, loss in seen.measured]
    assert losses[1] < losses[0]  # it learns by step 4
    cfg = twin(losses[1], tolerance=1e-6)
    _, chosen, _ = match.search(cfg, task, tmp_path)
    assert chosen.reached and chosen.loss <= losses[1] + cfg.train.match.tolerance
    assert chosen.steps == 4 and chosen.lr == pytest.approx(cfg.train.lr)
    assert chosen.lr in [f * cfg.train.lr for f in FACTORS]
    outcomes, _ = match._read(trial_dir(tmp_path, cfg.trial_id))
    assert len(outcomes) == 1 and [s for s, _ in outcomes[0].measured] == [2, 4]  # stopped


@pytest.mark.slow
def test_an_overshooting_measurement_keeps_the_one_closest_to_the_target(tmp_path):
    """A target just below the step-2 loss, tolerance 0: step 2 is above it, step 4 far below
    (<= target, so the run stops); the kept model is whichever is closer, and not reached."""
    probe = twin(0.01, lr_factors=(1.0,))
    task = task_from_config(probe.task)
    _, seen, _ = match.search(probe, task, tmp_path / "probe")
    (_, first), (_, second) = seen.measured[:2]
    target = first - 1e-4
    cfg = twin(target, lr_factors=(1.0,), tolerance=0.0)
    _, chosen, _ = match.search(cfg, task, tmp_path)
    expected = min((first, second), key=lambda loss: abs(loss - target))
    assert chosen.loss == pytest.approx(expected) and not chosen.reached


def test_the_rich_sibling_differs_only_in_regime_and_its_id_is_the_rich_trials():
    cfg = twin("network")
    sibling = rich_sibling(cfg)
    rich = validate(
        replace(twin("network"), **{"train.regime": "rich", "train.match": MatchConfig()})
    )
    assert sibling.trial_id == rich.trial_id
    assert (
        sibling.trial_id.replace("-rope-", "-rope-lazy-").split("-")[:-1]
        == (cfg.trial_id.split("-")[:-1])
    )  # the same slug but "-lazy", another hash
    assert to_dict(sibling)["train"] == {**to_dict(cfg)["train"], "regime": "rich",
                                         "match": to_dict(MatchConfig())}  # fmt: skip
    # a twin without train.match keeps the id it always had; a matched one moves with the
    # eval batches its search measures on, an unmatched one does not
    plain = replace(cfg, **{"train.match": MatchConfig()})
    assert plain.trial_id != cfg.trial_id
    more = {"eval.batches": 3}
    assert replace(plain, **more).trial_id == plain.trial_id
    assert replace(cfg, **more).trial_id != cfg.trial_id


def test_target_network_without_the_siblings_model_fails_naming_it(tmp_path):
    cfg = twin("network")
    sibling = rich_sibling(cfg)
    expected = (
        f"train.match.target: network: the rich sibling {sibling.trial_id} has no {MODEL_FILE} "
        f"in {tmp_path} (not trained yet, diverged or failed)"
    )
    with pytest.raises(match.SiblingMissing) as err:
        match.target_loss(cfg, task_from_config(cfg.task), tmp_path)
    assert str(err.value) == expected
    assert match.target_loss(twin(1.25), task_from_config(cfg.task), tmp_path) == 1.25


@pytest.mark.slow
def test_target_network_is_the_siblings_in_range_loss(tmp_path):
    cfg = twin("network")
    task = task_from_config(cfg.task)
    sibling = rich_sibling(cfg)
    trained = train(sibling).model
    folder = trial_dir(tmp_path, sibling.trial_id)
    folder.mkdir(parents=True)
    save_model(folder / MODEL_FILE, trained)
    expected = match.in_range_loss(trained, task, sibling)
    assert match.target_loss(cfg, task, tmp_path) == pytest.approx(expected, abs=1e-6)
    assert match.in_range_loss(
        load_model(folder / MODEL_FILE, make_model(sibling)), task, sibling
    ) == (pytest.approx(expected, abs=1e-6))


@pytest.mark.slow
def test_the_pipeline_evaluates_the_kept_twin_and_its_row_records_the_search(tmp_path):
    """Rich sibling, then its matched twin through every stage: the trials row holds the
    search's columns, the kept twin's eval loss at L_train is the recorded loss, and the
    target is the sibling's eval loss at L_train."""
    cfg = twin("network", tolerance=0.5)
    assert run_trial_stages(rich_sibling(cfg), tmp_path)[0] == "done"
    assert run_trial_stages(cfg, tmp_path)[0] == "done"
    row = read_trial_table(trial_dir(tmp_path, cfg.trial_id), "trials").row(0, named=True)
    assert row["match_lr"] in [f * cfg.train.lr for f in FACTORS]
    assert row["match_loss"] <= row["match_target"] + 0.5 and row["match_reached"]

    def loss_at_train(c):
        ev = read_trial_table(trial_dir(tmp_path, c.trial_id), "eval")
        whole = ev.filter(ev["position_bucket"].is_null() & (ev["length"] == 8))
        return whole["loss"][0]

    assert loss_at_train(cfg) == pytest.approx(row["match_loss"], abs=1e-5)
    assert loss_at_train(rich_sibling(cfg)) == pytest.approx(row["match_target"], abs=1e-5)


def test_yaml_target_is_network_or_a_number():
    base = to_dict(twin())
    for given, parsed in (("network", "network"), (2.5, 2.5), (3, 3.0)):
        data = {**base, "train": {**base["train"], "match": {"target": given}}}
        assert from_dict(TrialConfig, data).train.match.target == parsed


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"regime": "rich"}, "train.match.target: matching trains a lazy twin; "
                             "train.regime='rich' needs no target"),
        ({"lr_factors": ()}, "train.match.lr_factors: empty; the search needs at least one factor"),
        ({"tolerance": -0.1}, "train.match.tolerance: must be >= 0, got -0.1"),
        ({"target": "networks"}, "train.match.target: unknown 'networks'; allowed: network or a "
                                 "loss in nats"),
        ({"target": -1.0}, "train.match.target: must be > 0, got -1.0"),
        ({"measure_every": 0}, "train.match.measure_every: must be > 0, got 0"),
        ({"max_steps_factor": 0.5}, "train.match.max_steps_factor: must be >= 1, got 0.5"),
        ({"target": None}, "train.match.lr_factors: set without "
         "train.match.target; a trial that does not search leaves train.match at its defaults"),
        ({"ntk": True}, "ntk.enabled: the train.match search tracks no NTK; a matched trial "
                        "needs false"),
    ],
)  # fmt: skip
def test_bad_match_settings_are_refused_naming_the_key(changes, message):
    cfg = twin("network")
    fields = {
        k: v
        for k, v in changes.items()
        if k in ("lr_factors", "tolerance", "target", "max_steps_factor", "measure_every")
    }
    edits = {"train.match": dataclasses.replace(cfg.train.match, **fields)}
    if "regime" in changes:
        edits["train.regime"] = changes["regime"]
    if "ntk" in changes:
        edits["ntk.enabled"] = True
    with pytest.raises(ConfigError) as err:
        validate(replace(cfg, **edits))
    assert str(err.value) == message


def test_the_choice_is_the_closest_to_the_target_and_ignores_non_finite_losses():
    outs = [match.Outcome(1.0, 1e-3, 2, math.inf, False), match.Outcome(3.0, 3e-3, 4, 2.0, False)]
    assert match._best(outs, 1.0).factor == 3.0
    close = [match.Outcome(1.0, 1e-3, 2, 1.5, False), match.Outcome(3.0, 3e-3, 4, 0.6, False)]
    assert match._best(close, 1.0).factor == 3.0 and match._best(close, 1.2).factor == 1.0
    assert np.isinf(outs[0].loss)

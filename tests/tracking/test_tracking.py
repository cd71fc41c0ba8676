"""The `tracking:` block and the trackers' runs, without training: config, refusals, tags,
TensorBoard and W&B runs read back with their own readers, resume, a failing tracker."""

import importlib.util

import pytest

from rope_lab.cli import main
from rope_lab.config import ConfigError
from rope_lab.hooks import StepState
from rope_lab.sweep.spec import parse_spec
from rope_lab.tracking.config import TrackingConfig, for_workers
from rope_lab.tracking.runs import TrialTracker
from rope_lab.tracking.scalars import eval_scalars, ntk_scalars, train_scalars
from rope_lab.tracking.trial_logs import ntk_sink, train_hook
from tests.helpers import tiny_trial
from tests.sweep.conftest import TINY, write_spec
from tests.tracking.readers import tb_hparams, tb_scalars, wandb_runs

TRACKING = {"tensorboard": "tb", "wandb": "proj", "wandb_mode": "offline"}


def _rows(steps, shift=0.0):
    return [
        {
            "step": s,
            "loss": 3.0 - s / 10 + shift,
            "lr": 1e-3 * s,
            "grad_norm": 0.5 + s,
            "tokens_per_s": 1000.0 + s,
        }
        for s in steps
    ]


def test_tracking_block_is_parsed_and_leaves_trial_ids_unchanged():
    plain = parse_spec(TINY)
    tracked = parse_spec({**TINY, "tracking": TRACKING})
    assert tracked.tracking == TrackingConfig(tensorboard="tb", wandb="proj", wandb_mode="offline")
    assert plain.tracking == TrackingConfig() and not plain.tracking.enabled
    assert [t.trial_id for t in tracked.trials] == [t.trial_id for t in plain.trials]
    assert tracked.trials == plain.trials


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            {"wandb_mode": "onlin"},
            "tracking.wandb_mode: unknown value 'onlin'; allowed: auto, online, offline",
        ),
        (
            {"tensorbord": "tb"},
            "tracking.tensorbord: unknown key 'tensorbord' (did you mean "
            "'tensorboard'?); allowed: tensorboard, wandb, wandb_dir, wandb_mode",
        ),
        ({"wandb": " "}, "tracking.wandb: must not be empty"),
        ({"tensorboard": 3}, "tracking.tensorboard: expected a string, got 3"),
    ],
)
def test_bad_tracking_block_is_one_line_naming_the_key(block, message):
    with pytest.raises(ConfigError) as err:
        parse_spec({**TINY, "tracking": block})
    assert str(err.value) == f"sweep spec: {message}"


def _without(monkeypatch, package):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a)
    )


def test_tracker_not_installed_is_refused_by_plan_and_run(monkeypatch, tmp_path, capsys):
    _without(monkeypatch, "wandb")
    spec = write_spec(tmp_path, tracking={"wandb": "proj"})
    assert main(["sweep", "plan", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"rope-lab: error: {spec}: tracking.wandb: the wandb package is not installed; "
        "pip install 'rope_lab[tracking]'\n"
    )
    plain = write_spec(tmp_path)
    out = tmp_path / "runs"
    assert main(["sweep", "run", str(plain), "--out", str(out), "--wandb", "proj"]) == 1
    assert capsys.readouterr().err == (
        "rope-lab: error: --wandb: the wandb package is not installed; "
        "pip install 'rope_lab[tracking]'\n"
    )
    assert not out.exists()  # refused before any work


def test_workers_get_absolute_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert for_workers(TrackingConfig(), tmp_path / "run") is None
    plain = for_workers(TrackingConfig(tensorboard="tb", wandb="p"), tmp_path / "run")
    assert plain == {
        "tensorboard": str(tmp_path / "tb"),
        "wandb": "p",
        "wandb_mode": "auto",
        "wandb_dir": str(tmp_path / "run"),
    }


def test_auto_mode_is_offline_without_an_api_key(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert TrackingConfig(wandb="p").resolved_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert TrackingConfig(wandb="p").resolved_mode() == "online"
    assert TrackingConfig(wandb="p", wandb_mode="offline").resolved_mode() == "offline"


def test_tags_of_train_ntk_and_eval_rows():
    assert train_scalars(_rows([5])[0]) == {
        "train/loss": 2.5,
        "train/lr": 5e-3,
        "train/grad_norm": 5.5,
        "train/tokens_per_s": 1005.0,
    }
    ntk = [
        {
            "probe_length": 16,
            "group": "total",
            "metric": "drift",
            "value": 0.25,
            "method": "none",
            "factor": 1.0,
            "kernel": "ntk",
        },
        {
            "probe_length": 32,
            "group": "attn",
            "metric": "trace",
            "value": 2,
            "method": "yarn",
            "factor": 4.0,
            "kernel": "ntk",
        },
        {
            "probe_length": 16,
            "group": "total",
            "metric": "trace",
            "value": 3.0,
            "method": "none",
            "factor": 1.0,
            "kernel": "nngp",
        },
    ]
    assert ntk_scalars(ntk) == {
        "ntk/drift/total/L16": 0.25,
        "ntk/trace/attn/L32/yarn_x4": 2.0,
        "ntk/nngp_trace/total/L16": 3.0,
    }
    base = {
        "method": "linear",
        "factor": 2.0,
        "finetune_steps": 0,
        "mode": None,
        "protocol": None,
        "depth": None,
        "position_bucket": None,
        "bits_per_byte": None,
    }
    rows = [
        {**base, "length": 32, "loss": 1.5, "accuracy": 0.5},
        {**base, "length": 32, "loss": 9.0, "accuracy": 0.0, "position_bucket": 16},
        {**base, "length": 64, "loss": float("nan"), "accuracy": 0.25, "finetune_steps": 10},
        {
            **base,
            "length": 64,
            "loss": 2.0,
            "accuracy": 1.0,
            "mode": "decode",
            "protocol": "prefill_fixed",
            "depth": 0.5,
            "bits_per_byte": 0.75,
        },
    ]
    assert eval_scalars(rows) == {
        "eval/linear_x2/loss/L32": 1.5,
        "eval/linear_x2/accuracy/L32": 0.5,
        "eval/linear_x2_ft10/accuracy/L64": 0.25,
        "eval/linear_x2_decode-prefill_fixed_depth0.5/loss/L64": 2.0,
        "eval/linear_x2_decode-prefill_fixed_depth0.5/accuracy/L64": 1.0,
        "eval/linear_x2_decode-prefill_fixed_depth0.5/bits_per_byte/L64": 0.75,
    }


def _train(tracker, rows, start, every=5):
    """What the train loop does with the hook: call it at each multiple of `every`."""
    hook = train_hook(tracker, every, start)
    history = []
    for row in rows:
        history.append(row)
        hook.fn(StepState(row["step"], None, None, history))


def test_tensorboard_run_reads_back_and_a_resume_replaces_the_steps_after_its_checkpoint(
    tmp_path,
):
    cfg = tiny_trial()
    tracking = TrackingConfig(tensorboard=str(tmp_path / "tb"))
    first = TrialTracker(tracking, cfg, resume_step=0)
    _train(first, _rows([5, 10, 15]), start=0)  # killed after step 15, checkpoint at 10
    first.close()
    again = TrialTracker(tracking, cfg, resume_step=10)
    _train(again, _rows([15, 20], shift=1.0), start=10)
    again.close()
    assert first.warnings == again.warnings == []
    folder = tmp_path / "tb" / "tiny" / cfg.trial_id
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2
    scalars = tb_scalars(folder)
    expected = _rows([5, 10]) + _rows([15, 20], shift=1.0)
    for key in ("loss", "lr", "grad_norm", "tokens_per_s"):
        got = scalars[f"train/{key}"]
        assert [s for s, _ in got] == [5, 10, 15, 20]  # once each: the old 15 is dropped
        assert [v for _, v in got] == pytest.approx([r[key] for r in expected], rel=1e-6)
    hparams = tb_hparams(folder)
    assert hparams["model.width"] == 32 and hparams["train.steps"] == 20
    assert hparams["model.position.kind"] == "rope"


class _Broken:
    def __init__(self, fail_at):
        self.fail_at, self.logged = fail_at, []

    def log(self, step, scalars):
        if step == self.fail_at:
            raise OSError("No space left on device")
        self.logged.append(step)

    def close(self):
        pass


def test_a_failing_tracker_is_dropped_with_one_warning_and_the_others_go_on(tmp_path):
    cfg = tiny_trial()
    tracker = TrialTracker(TrackingConfig(tensorboard=str(tmp_path / "tb")), cfg, resume_step=0)
    broken = _Broken(fail_at=10)
    tracker._runs["wandb"] = broken
    _train(tracker, _rows([5, 10, 15, 20]), start=0)
    tracker.close()
    assert broken.logged == [5]
    assert tracker.warnings == [
        f"tracking.wandb: trial {cfg.trial_id}: failed at step 10 (OSError: No space left on "
        "device); it logs nothing more for this trial, the Parquet tables stay the record"
    ]
    steps = [s for s, _ in tb_scalars(tmp_path / "tb" / "tiny" / cfg.trial_id)["train/loss"]]
    assert steps == [5, 10, 15, 20]


def test_a_tracker_that_cannot_start_warns(tmp_path):
    blocker = tmp_path / "tb"
    blocker.write_text("a file where the folder should be")
    cfg = tiny_trial()
    tracker = TrialTracker(TrackingConfig(tensorboard=str(blocker)), cfg, resume_step=0)
    _train(tracker, _rows([5]), start=0)
    tracker.close()
    assert len(tracker.warnings) == 1
    assert tracker.warnings[0].startswith(
        f"tracking.tensorboard: trial {cfg.trial_id}: could not start ("
    )


@pytest.mark.slow  # ~5 s: wandb starts its service process
def test_wandb_offline_run_holds_the_history_and_a_resume_continues_the_same_run(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = tiny_trial()
    tracking = TrackingConfig(wandb="rope-lab-test", wandb_dir=str(tmp_path))
    first = TrialTracker(tracking, cfg, resume_step=0)
    _train(first, _rows([5, 10]), start=0)
    first.close()
    again = TrialTracker(tracking, cfg, resume_step=10)
    _train(again, _rows([15, 20]), start=10)
    again.close()
    assert first.warnings == again.warnings == []
    runs = wandb_runs(tmp_path)
    assert len(runs) == 2  # one offline folder per process that logged, one run id
    for run in runs:
        assert (run["id"], run["name"], run["group"], run["project"]) == (
            cfg.trial_id,
            cfg.trial_id,
            "tiny",
            "rope-lab-test",
        )
        assert run["config"]["trial_id"] == cfg.trial_id
        assert run["config"]["model"]["width"] == 32
    history = [row for run in runs for row in run["history"]]
    assert [row["_step"] for row in history] == [5, 10, 15, 20]
    assert [row["train/loss"] for row in history] == pytest.approx(
        [r["loss"] for r in _rows([5, 10, 15, 20])]
    )


class _Recorder:
    def __init__(self):
        self.logged = []

    def log(self, step, scalars):
        self.logged.append((step, dict(scalars)))


def test_ntk_rows_go_to_the_table_first_then_to_the_trackers():
    calls = []
    row = {"probe_length": 16, "group": "total", "metric": "drift", "value": 0.5,
           "method": "none", "factor": 1.0, "kernel": "ntk"}  # fmt: skip
    recorder = _Recorder()
    sink = ntk_sink(recorder, lambda step, rows: calls.append((step, rows)))
    sink(7, [row])
    assert calls == [(7, [row])]
    assert recorder.logged == [(7, {"ntk/drift/total/L16": 0.5})]


def test_a_train_stage_started_again_from_step_0_replaces_what_its_killed_try_logged(tmp_path):
    cfg = tiny_trial()
    tracking = TrackingConfig(tensorboard=str(tmp_path / "tb"))
    for shift in (0.0, 1.0):  # killed before its first checkpoint, then run again from 0
        tracker = TrialTracker(tracking, cfg, resume_step=0)
        tracker.log(0, {"ntk/drift/total/L16": 0.5 + shift})
        _train(tracker, _rows([5, 10], shift=shift), start=0)
        tracker.close()
    scalars = tb_scalars(tmp_path / "tb" / "tiny" / cfg.trial_id)
    assert scalars["ntk/drift/total/L16"] == [(0, 1.5)]
    assert scalars["train/loss"] == [(5, 3.5), (10, 3.0)]

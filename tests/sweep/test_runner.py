"""Sweeps end to end: stages, tables, resume, failures, divergence, real Ray."""

import sys

import polars as pl
import pytest

from rope_lab.results import is_finished, load, trial_dir
from rope_lab.runtime import allocator
from rope_lab.sweep.runner import run_sweep
from rope_lab.sweep.spec import load_spec
from rope_lab.sweep.stages import compile_cache_dir
from rope_lab.trial.stage_plan import eval_stages
from tests.sweep.conftest import TINY, write_spec


def _table_counts(run_dir):
    res = load(run_dir)
    return {name: res.table(name).collect().height for name in ("trials", "train", "eval")}


@pytest.mark.slow  # ~21 s on 2 cores
def test_serial_sweep_tables_checkpoints_and_rerun(tiny_spec, tmp_path):
    spec = load_spec(tiny_spec)
    out = tmp_path / "runs"
    summary = run_sweep(spec, out, runner="serial", progress=False)
    assert summary.count("done") == 2
    assert any(compile_cache_dir().iterdir())  # compiled programs kept for later runs
    run_dir = out / "tiny"
    res = load(run_dir)
    trials = res.trials.collect()
    assert trials.height == 2
    assert trials.schema["n_params"] == pl.Int64 and trials.schema["model.width"] == pl.Int64
    assert trials.schema["started_at"] == pl.Datetime("us", "UTC")
    assert set(trials["status"]) == {"done"}
    assert trials["error"].null_count() == 2
    train = res.train.collect()
    for tid in trials["trial_id"]:
        steps = train.filter(pl.col("trial_id") == tid)["step"].to_list()
        assert sorted(steps) == [5, 10, 15, 20]
        folder = trial_dir(run_dir, tid)
        assert is_finished(folder)
        assert (folder / "config.yaml").exists() and (folder / "model.eqx").exists()
        assert sorted(p.name for p in (folder / "checkpoints").iterdir() if p.name.isdigit()) == [
            "10",
            "20",
        ]
    ev = res.eval_with_config.filter(pl.col("position_bucket").is_null()).collect()
    rope = ev.filter(pl.col("model.position.kind") == "rope")
    assert set(zip(rope["method"], rope["factor"], strict=True)) == {
        ("default", 1.0),
        ("linear", 2.0),
        ("dynamic", 2.0),
    }
    alibi = ev.filter(pl.col("model.position.kind") == "alibi")
    assert set(alibi["method"]) == {"none"} and sorted(alibi["length"]) == [16, 32]
    before = _table_counts(run_dir)
    again = run_sweep(spec, out, runner="serial", progress=False)
    assert again.skipped == 2 and again.count("done") == 0
    assert _table_counts(run_dir) == before


def test_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    spec_path = write_spec(
        tmp_path,
        base__task={"name": "lm_text", "vocab_size": 256, "params": {"path": str(text)}},
        grid={"model.position.kind": ["alibi", "none"]},
        scaling=None,  # no RoPE trial to scale
    )
    spec = load_spec(spec_path)  # validated while the file exists
    bad = spec.trials[0]
    text.write_text("short")  # the corpus shrinks after validation: every worker now fails
    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    assert summary.count("failed") == 2
    trials = load(tmp_path / "runs" / "tiny").trials.collect()
    row = trials.filter(pl.col("trial_id") == bad.trial_id).row(0, named=True)
    assert row["status"] == "failed" and "Traceback" in row["error"]
    assert not is_finished(trial_dir(tmp_path / "runs" / "tiny", bad.trial_id))
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    rerun = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    assert rerun.count("done") == 2
    trials = load(tmp_path / "runs" / "tiny").trials.collect()
    assert trials.height == 2 and set(trials["status"]) == {"done"}


def test_divergence_is_a_result(tmp_path):
    spec = load_spec(
        write_spec(
            tmp_path,
            base__train={
                "length": 16,
                "batch_size": 8,
                "steps": 20,
                "lr": 1e30,
                "clip_norm": 1e30,
                "log_every": 5,
            },
        )
    )
    summary = run_sweep(spec, tmp_path / "runs", runner="serial", progress=False)
    assert summary.count("diverged") == 2
    res = load(tmp_path / "runs" / "tiny")
    assert set(res.trials.collect()["status"]) == {"diverged"}
    assert res.eval.collect().height == 0
    assert run_sweep(spec, tmp_path / "runs", runner="serial", progress=False).skipped == 2


@pytest.mark.ray
@pytest.mark.slow
def test_ray_sweep_matches_serial(tiny_spec, tmp_path):
    spec = load_spec(tiny_spec)
    serial = run_sweep(spec, tmp_path / "serial", runner="serial", progress=False)
    ray_run = run_sweep(spec, tmp_path / "ray", runner="ray", progress=False)
    assert serial.count("done") == ray_run.count("done") == 2
    cols = ["trial_id", "method", "factor", "length", "position_bucket", "loss", "accuracy"]
    a = load(serial.run_dir).eval.select(cols).sort(cols[:5]).collect()
    b = load(ray_run.run_dir).eval.select(cols).sort(cols[:5]).collect()
    assert a.equals(b)  # the same numbers whichever runner ran them


@pytest.mark.slow  # ~16 s
def test_a_stage_held_by_another_driver_is_left_alone(tiny_spec, tmp_path):
    from rope_lab.results import TrialLease
    from rope_lab.sweep.stages import TRAIN_STAGE, stage_dir

    spec = load_spec(tiny_spec)
    out = tmp_path / "runs"
    held = spec.trials[0]
    other_driver = TrialLease(stage_dir(out / "tiny", held.trial_id, TRAIN_STAGE))
    assert other_driver.acquire()
    summary = run_sweep(spec, out, runner="serial", progress=False)
    assert summary.statuses[held.trial_id] == "busy"
    assert summary.statuses[spec.trials[1].trial_id] == "done"
    assert not is_finished(trial_dir(out / "tiny", held.trial_id))
    assert not (trial_dir(out / "tiny", held.trial_id) / "trials").exists()  # no row written
    other_driver.release()
    rerun = run_sweep(spec, out, runner="serial", progress=False)
    assert rerun.skipped == 1 and rerun.statuses[held.trial_id] == "done"


def _allocator_setting() -> str | None:
    import os

    return os.environ.get("GLIBC_TUNABLES")


@pytest.mark.ray
@pytest.mark.slow  # ~14 s: starts Ray workers
@pytest.mark.skipif(
    not allocator.applies({}), reason="glibc tunables exist on Linux with glibc only"
)
def test_ray_workers_start_with_the_tuned_allocator():
    from rope_lab.sweep.runner import RayRunner
    from rope_lab.sweep.spec import Resources

    runner = RayRunner(Resources(num_cpus=1, num_gpus=0), max_retries=0)
    try:
        _, seen = runner.wait([runner.submit(_allocator_setting)])
    finally:
        runner.shutdown()
    assert allocator.is_tuned({"GLIBC_TUNABLES": seen})


def _jax_memory_settings() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith("XLA_PYTHON_CLIENT_")}


@pytest.mark.ray
@pytest.mark.slow  # starts its own Ray instance (~25 s)
def test_a_task_sharing_a_device_gets_its_memory_share(monkeypatch):
    """On a cluster started by someone else (here: this test, with one logical GPU), a trial
    asking for a quarter of a device runs with JAX's memory fraction set to its share."""
    import ray

    from rope_lab.runtime.device_share import MEM_FRACTION, PREALLOCATE
    from rope_lab.sweep.runner import RayRunner
    from rope_lab.sweep.spec import Resources

    monkeypatch.delenv(MEM_FRACTION, raising=False)
    monkeypatch.delenv(PREALLOCATE, raising=False)
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        shared = RayRunner(Resources(num_cpus=1, num_gpus=0.25), max_retries=0)
        _, seen_shared = shared.wait([shared.submit(_jax_memory_settings)])
        whole = RayRunner(Resources(num_cpus=1, num_gpus=1), max_retries=0)
        _, seen_whole = whole.wait([whole.submit(_jax_memory_settings)])
    finally:
        ray.shutdown()
    assert seen_shared == {MEM_FRACTION: "0.22"}
    assert seen_whole == {}


class _Stream:
    """A non-TTY stream that keeps what was written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_progress_line_counts_trials_and_stages(monkeypatch):
    from rope_lab.sweep import runner

    stream = _Stream()
    bar = runner.Progress(total=34, skipped=2, stages=102, stream=stream)
    bar.done, bar.failed, bar.running, bar.stages_done = 9, 1, 3, 40
    clock = iter([100.0, 112.0])
    monkeypatch.setattr(runner.time, "perf_counter", lambda: next(clock))
    bar.start = next(clock)
    bar.show()
    # 10 trials in 12 s, 22 left: ETA 26 s
    assert stream.text == (
        "12/34 trials finished (40/102 stages): 1 failed, 2 skipped; 3 stages active; "
        "elapsed 12s, ETA 26s\n"
    )


def test_sweep_progress_counts_stages_and_drops_those_a_diverged_trial_skips(
    tiny_spec, tmp_path, monkeypatch, capsys
):
    from rope_lab.sweep import runner

    spec = load_spec(tiny_spec)  # rope (train, as trained, linear x2, dynamic x2), alibi (2)

    def stage(config, run_dir, name):
        diverges = name == "train" and config["model"]["position"]["kind"] == "rope"
        return {"status": "diverged" if diverges else "done"}

    monkeypatch.setattr(runner, "run_stage", stage)
    monkeypatch.setattr(runner, "finish_trial", lambda run_dir, cfg, results, sweep: "done")
    monkeypatch.setattr(runner.time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(runner.time, "time", lambda: 0.0)
    run_sweep(spec, tmp_path / "runs", runner="serial")
    lines = capsys.readouterr().err.splitlines()
    rope, alibi = (t.trial_id for t in spec.trials)
    # planned 4 + 2 stages; rope's train stage diverged, so its 3 other stages never run; a
    # log that is not a terminal gets the opening line and a line per ended stage
    (as_trained,) = [s.name for s in eval_stages(spec.trials[1])]
    assert lines == [
        "sweep tiny: 2 trials (0 finished before), 6 stages to run on the serial runner; "
        "each stage task asks for 1 CPU, 0 GPU",
        f"  {rope} train: diverged after 0s",
        "1/2 trials finished (1/3 stages): 0 failed, 0 skipped; 1 stages active; "
        "elapsed 0s, ETA 0s",
        f"  {alibi} train: done after 0s",
        f"  {alibi} {as_trained}: done after 0s",
        "2/2 trials finished (3/3 stages): 0 failed, 0 skipped; 0 stages active; "
        "elapsed 0s, ETA 0s",
    ]


def test_sweep_progress_counts_every_planned_stage(tiny_spec, tmp_path, monkeypatch, capsys):
    from rope_lab.sweep import runner

    spec = load_spec(tiny_spec)
    monkeypatch.setattr(runner, "run_stage", lambda *a: {"status": "done"})
    monkeypatch.setattr(runner, "finish_trial", lambda run_dir, cfg, results, sweep: "done")
    monkeypatch.setattr(runner.time, "perf_counter", lambda: 0.0)
    summary = run_sweep(spec, tmp_path / "runs", runner="serial")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln[0].isdigit()]
    # the serial runner runs both train stages first, then rope's three other stages, then
    # alibi's as-trained stage
    assert [line.split(":")[0] for line in lines] == [
        "1/2 trials finished (5/6 stages)",
        "2/2 trials finished (6/6 stages)",
    ]
    assert summary.count("done") == 2
    assert (tmp_path / "runs" / "tiny" / "trials").is_dir()  # a run directory from the start


@pytest.mark.slow  # ~25 s
def test_a_spec_that_adds_stages_runs_only_them_and_the_tables_follow_the_spec(tmp_path):
    """The trial id names the trained model: a second spec adding a scaling and a fine-tune
    trains nothing and runs only the new stages; one that reads differently reruns the
    evaluation stages alone; rows of stages a spec does not ask for are set aside (never
    lost, never doubled) and come back, unchanged, when a spec asks for them again."""
    out = tmp_path / "runs"
    first = load_spec(write_spec(tmp_path))
    run_sweep(first, out, runner="serial", progress=False)
    run_dir = out / "tiny"
    key = ["trial_id", "method", "factor", "finetune_steps", "length", "position_bucket"]
    original = load(run_dir).eval.collect().sort(key)
    train_rows = load(run_dir).train.collect().height

    more = load_spec(
        write_spec(
            tmp_path,
            scaling={"methods": ["linear", "dynamic", "yarn"], "factors": [2]},
            base__eval={**TINY["base"]["eval"], "finetune_steps": 2, "finetune_methods": ["yarn"]},
        )
    )
    assert [t.trial_id for t in more.trials] == [t.trial_id for t in first.trials]
    summary = run_sweep(more, out, runner="serial", progress=False)
    ran = {
        (tid[:12], r["stage"].split("-")[0])
        for tid, results in summary.stages.items()
        for r in results
        if not r.get("cached")
    }
    assert ran == {("passkey-rope", "yarn_x2")}  # no training, no stage run twice
    ev = load(run_dir).eval.collect()
    assert ev.select(key).is_duplicated().sum() == 0
    assert set(ev.filter(pl.col("method") == "yarn")["finetune_steps"]) == {0, 2}
    assert load(run_dir).train.collect().height == train_rows

    reread = load_spec(write_spec(tmp_path, base__eval={**TINY["base"]["eval"], "batches": 2}))
    summary = run_sweep(reread, out, runner="serial", progress=False)
    for results in summary.stages.values():
        assert {r["stage"] for r in results if not r.get("cached")} == {
            r["stage"] for r in results if r["stage"] != "train"
        }
    ev = load(run_dir).eval.collect()
    assert ev.select(key).is_duplicated().sum() == 0 and "yarn" not in set(ev["method"])
    assert any(
        (trial_dir(run_dir, t.trial_id) / "superseded" / "eval").iterdir() for t in first.trials
    )

    again = run_sweep(first, out, runner="serial", progress=False)
    assert all(r.get("cached") for results in again.stages.values() for r in results)
    assert load(run_dir).eval.collect().sort(key).equals(original)
    assert run_sweep(first, out, runner="serial", progress=False).skipped == 2


def test_a_request_the_in_process_cluster_cannot_fit_is_refused_naming_the_key():
    from rope_lab.config import ConfigError
    from rope_lab.sweep.runner import fits
    from rope_lab.sweep.spec import Resources

    laptop = {"CPU": 2.0, "memory": 1e9}
    fits(Resources(num_cpus=2, num_gpus=0), laptop)
    with pytest.raises(
        ConfigError, match=r"resources.num_gpus: each trial asks for 1 GPU .* has 0"
    ):
        fits(Resources(num_cpus=1, num_gpus=1), laptop)
    with pytest.raises(
        ConfigError, match=r"resources.num_cpus: each trial asks for 4 CPU .* has 2"
    ):
        fits(Resources(num_cpus=4, num_gpus=0), laptop)
    fits(Resources(num_cpus=1, num_gpus=0.25), {"CPU": 16.0, "GPU": 1.0})


class _FakeRay:
    """Stands in for `ray` in RayRunner: records each init call, and during it, the node address
    Ray would resolve and whether Ray believed clusters supported."""

    def __init__(self, monkeypatch) -> None:
        import ray
        from ray._private import ray_constants, services

        self.inits: list[dict] = []
        self.shutdowns = 0
        self.resolved: list[str] = []
        self.cluster_mode: list[bool] = []

        def init(**kwargs):
            self.inits.append(kwargs)
            self.resolved.append(services.get_node_ip_address())
            self.cluster_mode.append(ray_constants.ENABLE_RAY_CLUSTER)

        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", init)
        monkeypatch.setattr(ray, "shutdown", self.shutdown)
        monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
        monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: self.resolved[-1])

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_the_in_process_runner_starts_ray_on_loopback_with_a_reaper(monkeypatch):
    from rope_lab.runtime import local_ray
    from rope_lab.sweep.runner import RayRunner
    from rope_lab.sweep.spec import Resources

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = _FakeRay(monkeypatch)
    reaped: list[str] = []

    class Reaper:
        def communicate(self) -> None:
            reaped.append("closed")

    monkeypatch.setattr(local_ray, "start_reaper", lambda processes: Reaper())
    runner = RayRunner(Resources(num_cpus=1, num_gpus=0), max_retries=0)
    assert fake.inits == [
        {
            "include_dashboard": False,
            "log_to_driver": False,
            "runtime_env": {"env_vars": allocator.worker_env()},
        }
    ]
    assert fake.resolved == ["127.0.0.1"]  # every Ray process binds to the node address
    assert fake.cluster_mode == [False]
    runner.shutdown()
    assert fake.shutdowns == 1
    assert reaped == (["closed"] if sys.platform.startswith("linux") else [])


def test_a_cluster_runner_keeps_the_addresses_its_owner_configured(monkeypatch):
    from ray._private import ray_constants

    from rope_lab.runtime import local_ray
    from rope_lab.sweep.runner import RayRunner
    from rope_lab.sweep.spec import Resources

    fake = _FakeRay(monkeypatch)
    monkeypatch.setattr(local_ray, "start_reaper", lambda processes: pytest.fail("reaper"))
    runner = RayRunner(Resources(num_cpus=1, num_gpus=0), max_retries=0, address="10.0.0.1:6379")
    assert fake.inits == [
        {
            "address": "10.0.0.1:6379",
            "include_dashboard": False,
            "log_to_driver": False,
            "runtime_env": {"env_vars": allocator.worker_env()},
        }
    ]
    assert fake.cluster_mode == [ray_constants.ENABLE_RAY_CLUSTER]  # Ray's own choice
    runner.shutdown()
    assert fake.shutdowns == 1


def test_in_process_ray_on_a_routable_node_address_is_refused(monkeypatch):
    import ray

    from rope_lab.runtime import local_ray

    fake = _FakeRay(monkeypatch)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "192.0.2.2")
    with pytest.raises(
        RuntimeError, match=r"in-process Ray took node address 192\.0\.2\.2, not loopback"
    ):
        local_ray.LocalRay(ray, include_dashboard=False)
    assert fake.shutdowns == 1

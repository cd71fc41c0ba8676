"""The kernel map after training (`rope_lab.ntk.trained_map`, `rope-lab kernel-map --from-run`):
on a real two-trial sweep its step-0 rows are `measure_at_init`'s and its trained rows the run's
NTK rows at the last step; on written NTK tables, the refusals' exact text."""

from __future__ import annotations

import pytest

from rope_lab.ntk.kernel_map import COLLAPSE, MAP_METRICS
from rope_lab.ntk.trained_map import stage_steps, tracked_steps
from rope_lab.results import append_rows
from rope_lab.typed import ConfigError
from tests.sweep.conftest import write_spec

STEPS = 6
TRAIN = {"length": 8, "batch_size": 4, "steps": STEPS, "warmup_steps": 1, "log_every": 3,
         "checkpoint_every": STEPS}  # fmt: skip
EVAL = {"length_multipliers": [1], "batches": 1, "batch_size": 2, "position_buckets": 1}
NTK = {"probes": 3, "probe_multipliers": [2, 4], "steps": [0, 3, STEPS], "position_probes": 1,
       "pad_to_longest": True, "nngp_samples": 2}  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """Two trials (RoPE, ALiBi) trained 6 steps at L_train 8, NTK at steps 0, 3 and 6 on 3 probes
    at 2x and 4x, with the NNGP (2 initialisations); RoPE's linear-scaling stage adds rows at
    step 6 of the kernel under that scaling, which the trained map must leave out."""
    from rope_lab.sweep.runner import run_sweep
    from rope_lab.sweep.spec import load_spec

    tmp = tmp_path_factory.mktemp("trained_map")
    spec = write_spec(
        tmp,
        name="trained_map",
        base__model={"depth": 1, "head_dim": 8, "width": 16},
        base__train=TRAIN,
        base__eval=EVAL,
        base__ntk=NTK,
        scaling={"methods": ["linear"], "factors": [2]},
    )
    summary = run_sweep(load_spec(spec), tmp / "runs", runner="serial", progress=False)
    assert summary.count("done") == 2
    return summary.run_dir


def _without(row: dict, *keys: str) -> dict:
    return {k: v for k, v in row.items() if k not in keys}


@pytest.mark.slow
def test_the_step_0_rows_are_the_map_at_initialisation(trained_run):
    """The tracker's step-0 pass in training IS measure_at_init's pass: same config, probes,
    model and NNGP keys, so every column agrees to float rounding."""
    from rope_lab.ntk.kernel_map import measure_at_init
    from rope_lab.ntk.trained_map import _trial_config, rows_from_run

    rows = rows_from_run(trained_run)
    for trial in sorted({r["trial_id"] for r in rows}):
        init = [r for r in rows if r["trial_id"] == trial and r["stage"] == "init"]
        fresh = measure_at_init(_trial_config(trained_run, trial))
        assert [(r["kernel"], r["ratio"]) for r in init] == [
            ("ntk", 2.0), ("ntk", 4.0), ("nngp", 2.0), ("nngp", 4.0)
        ]  # fmt: skip
        assert len(init) == len(fresh)
        for got, want in zip(init, fresh, strict=True):
            got, want = _without(got, "trial_id", "step", "stage", "seconds"), dict(want)
            for column in (*MAP_METRICS, COLLAPSE):
                value, expected = got.pop(column), want.pop(column)
                if expected is None:  # the NNGP's collapse
                    assert value is None and column == COLLAPSE and got["kernel"] == "nngp"
                else:
                    assert value == pytest.approx(expected, rel=1e-6, abs=1e-9)
            assert got == _without(want, "seconds")
        assert all(r["step"] == 0 for r in init)


def _collapse_at(run, step: int) -> dict[tuple[str, int], float | None]:
    """target_collapse of each trial and long length with the kernels file of `step` and the
    targets of the tracker's own (full) probe draw."""
    from rope_lab.ntk.kernel_map import target_collapse
    from rope_lab.ntk.probes import draw_probes, readout, target_values
    from rope_lab.ntk.trained_map import _trial_config
    from rope_lab.runtime.checked_files import read_npz
    from rope_lab.trial.train import make_task_from

    out = {}
    for folder in sorted((run / "trials").iterdir()):
        cfg = _trial_config(run, folder.name)
        y = target_values(cfg, draw_probes(cfg, make_task_from(cfg)), readout(cfg))
        kernels = read_npz(folder / "ntk" / f"kernels_{step:08d}.npz")
        for length in cfg.ntk_lengths:
            value = target_collapse(kernels, y, length, cfg.train.length, cfg.ntk.ridge)
            out[folder.name, length] = value
    return out


@pytest.mark.slow
def test_the_trained_rows_are_the_runs_ntk_rows_at_the_last_step(trained_run):
    import polars as pl

    from rope_lab.ntk.trained_map import rows_from_run
    from rope_lab.results import load

    ntk = (
        load(trained_run)
        .ntk.filter(
            (pl.col("step") == STEPS) & (pl.col("group") == "total") & (pl.col("method") == "none")
        )
        .collect()
    )
    collapse = _collapse_at(trained_run, STEPS)
    for step in (None, STEPS):
        trained = [r for r in rows_from_run(trained_run, step) if r["stage"] == "trained"]
        assert len(trained) == 4 and {r["kernel"] for r in trained} == {"ntk"}
        assert {r["step"] for r in trained} == {STEPS}
        for row in trained:
            for metric in MAP_METRICS:
                want = ntk.filter(
                    (pl.col("trial_id") == row["trial_id"])
                    & (pl.col("probe_length") == row["probe_length"])
                    & (pl.col("metric") == metric)
                )["value"]
                assert want.to_list() == [row[metric]]
            assert row[COLLAPSE] == collapse[row["trial_id"], row["probe_length"]]
    middle = [r for r in rows_from_run(trained_run, 3) if r["stage"] == "trained"]
    assert {r["step"] for r in middle} == {3}
    assert middle[0]["tail_cos_mean"] != trained[0]["tail_cos_mean"]


@pytest.mark.slow
def test_the_command_writes_both_stages_and_prints_them_side_by_side(trained_run, tmp_path,
                                                                     capsys):  # fmt: skip
    import polars as pl

    from rope_lab.cli import main

    out = tmp_path / "map.parquet"
    assert main(["kernel-map", "--from-run", str(trained_run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"2 trials of 1 run(s): init at step 0, trained at step {STEPS}" in printed
    assert "init_crossed_at" in printed and "trained_extrapolated" in printed
    frame = pl.read_parquet(out)
    assert frame.group_by("stage").len().sort("stage").rows() == [("init", 8), ("trained", 4)]
    assert main(["kernel-map", "--from-run", str(trained_run), "--step", "4"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].endswith("tracked the NTK at steps 0, 3, 6; step 4 is not tracked")


def _ntk_run(tmp_path, steps_by_trial: dict[str, list[int]]):
    """A run directory whose trials have only `tail_cos_mean` NTK rows at the given steps."""
    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    for trial, steps in steps_by_trial.items():
        rows = [
            {"step": s, "probe_length": 16, "group": "total", "metric": "tail_cos_mean",
             "value": 0.5, "method": "none", "factor": 1.0, "kernel": "ntk"}
            for s in steps
        ]  # fmt: skip
        if rows:
            append_rows(run / "trials" / trial, "ntk", rows, segment="ntk_all")
        else:
            (run / "trials" / trial).mkdir()
    return run


@pytest.mark.parametrize(
    ("steps", "step", "message"),
    [
        ({"a": []}, None, "{run}: no NTK rows; train it with ntk.enabled and ntk.steps past 0"),
        ({"a": [0]}, None,
         "{run}: trial a tracked the NTK at steps 0; no step after 0 to read as trained"),
        ({"a": [0, 5, 10], "b": [0, 10]}, 5,
         "{run}: trial b tracked the NTK at steps 0, 10; step 5 is not tracked"),
        ({"a": [5, 10]}, None,
         "{run}: trial a tracked the NTK at steps 5, 10; no step 0 to compare with"),
    ],
)  # fmt: skip
def test_refusals_name_the_run_the_trial_and_its_tracked_steps(tmp_path, steps, step, message):
    from rope_lab.ntk.trained_map import rows_from_run

    run = _ntk_run(tmp_path, steps)
    with pytest.raises(ConfigError) as err:
        rows_from_run(run, step)
    assert str(err.value) == message.format(run=run)


def test_the_trained_step_is_each_trials_last_or_the_one_asked_for(tmp_path):
    import polars as pl

    from rope_lab.results import load

    run = _ntk_run(tmp_path, {"b": [10, 0, 4], "a": [0, 7]})
    steps = tracked_steps(load(run).ntk.collect().filter(pl.col("kernel") == "ntk"))
    assert steps == {"a": [0, 7], "b": [0, 4, 10]}
    assert stage_steps(run, steps, None) == {"a": 7, "b": 10}
    with pytest.raises(ConfigError, match="trial a tracked the NTK at steps 0, 7; step 4 is not"):
        stage_steps(run, steps, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["kernel-map"], "kernel-map: give a sweep SPEC or --from-run RUN_DIR..., not both"),
        (["kernel-map", "s.yaml", "--from-run", "r"],
         "kernel-map: give a sweep SPEC or --from-run RUN_DIR..., not both"),
        (["kernel-map", "s.yaml", "--step", "3"],
         "kernel-map: --step reads a trained run; give it with --from-run"),
        (["kernel-map", "--from-run", "r", "--step", "0"],
         "--step: expected 'last' or a training step > 0, got '0'"),
        (["kernel-map", "--from-run", "r", "--step", "end"],
         "--step: expected 'last' or a training step > 0, got 'end'"),
    ],
)  # fmt: skip
def test_the_command_refuses_bad_flags_in_one_line(argv, message, capsys):
    from rope_lab.cli import main

    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rope-lab: error: {message}"]

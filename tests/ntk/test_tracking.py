"""NTK tracking during training: rows, drift, resume and RoPE scalings."""

import numpy as np
import polars as pl
import pytest

from rope_lab.config import replace, to_dict
from rope_lab.ntk.tracking import NTKTracker, ntk_steps
from rope_lab.results import load
from rope_lab.sweep.stages import run_stage, run_train_stage
from rope_lab.trial.scaling_plan import scalings_for
from rope_lab.trial.stage_plan import eval_stages
from rope_lab.trial.train import make_model, make_task_from
from tests.helpers import tiny_trial


def _cfg(kind, **changes):
    base = replace(
        tiny_trial(kind, steps=4),
        **{"ntk.probes": 3, "ntk.probe_multipliers": (2.0,), "eval.factors": (2.0,)},
    )
    return replace(base, **changes) if changes else base


def test_default_steps_are_log_spaced_plus_last():
    cfg = tiny_trial(steps=20)
    assert ntk_steps(cfg) == (0, 1, 2, 4, 8, 16, 20)
    assert ntk_steps(replace(cfg, **{"ntk.steps": (5, 0)})) == (0, 5)


@pytest.mark.slow  # ~20 s on 2 cores
def test_tracker_rows_and_drift():
    cfg = _cfg("learned")
    model = make_model(cfg)
    tracker = NTKTracker(cfg, make_task_from(cfg))
    rows0 = tracker.measure(model, 0)
    by = {(r["metric"], r["probe_length"], r["group"]): r["value"] for r in rows0}
    assert by[("distance_from_init", 16, "total")] == 0.0
    assert 0.0 < by[("k_train_cos_mean", 16, "total")] <= 1.0
    assert 0.0 <= by[("coverage_mean", 32, "total")] <= 1.0 + 1e-9
    assert ("tail_cos_mean", 32, "total") in by and ("eig_1", 16, "total") in by
    groups = {g for (m, _, g) in by if m == "k_train_mean"}
    assert groups == {"total", "embedding", "attention_qk", "attention_vo", "mlp", "norms", "head"}
    parts = sum(v for (m, n, g), v in by.items() if m == "k_cross_mean" and g != "total")
    assert parts == pytest.approx(by[("k_cross_mean", 32, "total")], rel=1e-5)
    from rope_lab.trial.train import train

    trained = train(replace(cfg, **{"train.lr": 3e-2, "train.warmup_steps": 0})).model
    rows4 = {
        (r["metric"], r["probe_length"], r["group"]): r["value"]
        for r in tracker.measure(trained, 4)
    }
    assert rows4[("distance_from_init", 16, "total")] > 0
    assert rows4[("velocity", 16, "total")] == pytest.approx(
        rows4[("distance_from_init", 16, "total")] / 4
    )


RELATIVE = {"rope": True, "alibi": True, "none": True, "learned": False, "sinusoidal": False}


@pytest.mark.parametrize(
    "kind",
    [k if k == "rope" else pytest.param(k, marks=pytest.mark.slow) for k in RELATIVE],
)
def test_shift_invariance_per_group_at_init_and_after_training(kind):
    """Only relative positions enter RoPE, ALiBi and NoPE logits, so at depth 2 the kernel and
    every group's part are unchanged by a shift of all positions, before and after training
    (the seeds' exercise 6.5); absolute encodings are not."""
    cfg = _cfg(kind, **{"model.depth": 2, "train.lr": 3e-2, "train.warmup_steps": 0})
    tracker = NTKTracker(cfg, make_task_from(cfg))
    init = make_model(cfg)
    from rope_lab.trial.train import train

    trained = train(cfg).model
    moved = [float(np.max(np.abs(a - b))) for a, b in zip(*_leaves(init, trained), strict=True)]
    assert max(moved) > 1e-3  # training changed the weights
    for step, model in ((0, init), (4, trained)):
        rows = tracker.shift_invariance(model, step)
        errors = {r["group"]: r["value"] for r in rows}
        assert {r["metric"] for r in rows} == {"shift_invariance_error"}
        assert set(errors) >= {"total", "attention_qk", "attention_vo", "mlp", "head"}
        if RELATIVE[kind]:
            assert max(errors.values()) < 1e-4, errors
        else:
            assert errors["total"] > 1e-2, errors


def _leaves(a, b):
    import equinox as eqx
    import jax

    from rope_lab.model.transformer import trainable

    return ([np.asarray(x) for x in jax.tree.leaves(eqx.filter(m, trainable(m)))] for m in (a, b))


def test_rope_scalings_rows():
    cfg = _cfg("rope")
    tracker = NTKTracker(cfg, make_task_from(cfg))
    rows = tracker.under_scalings(make_model(cfg), 4, scalings_for(cfg)[1:])
    assert {(r["method"], r["factor"]) for r in rows} == {("linear", 2.0), ("dynamic", 2.0)}
    assert {r["probe_length"] for r in rows} == {32}
    alibi = _cfg("alibi")
    assert NTKTracker(alibi, make_task_from(alibi)).under_scalings(None, 4, scalings_for(cfg)) == []


def test_rows_under_scalings_are_the_registered_scaled_metrics(monkeypatch):
    """A cross metric registered with `scaled` (here at test time, into a copy of the registry)
    is written under every RoPE scaling and probe length; one giving None writes no row, and a
    cross metric without `scaled` none."""
    from rope_lab.ntk.metrics import Metric
    from rope_lab.registry import NTK_METRICS

    NTK_METRICS.names()  # loaded, so the copy holds every registered metric
    monkeypatch.setattr(NTK_METRICS, "_entries", dict(NTK_METRICS._entries))
    probes = Metric(lambda k: float(k.K_cross.shape[0]), "cross", False, scaled=True)
    NTK_METRICS.register("probe_count")(probes)
    NTK_METRICS.register("probe_none")(Metric(lambda k: None, "cross", False, scaled=True))
    NTK_METRICS.register("probe_unscaled")(Metric(lambda k: 1.0, "cross", False))
    scaled = [name for name, m in NTK_METRICS.items() if m.scaled]
    assert scaled[:4] == ["cross_train_ratio", "cross_train_cos_ratio", "k_cross_cos_mean",
                          "tail_cos_mean"]  # fmt: skip
    cfg = _cfg("rope")
    tracker = NTKTracker(cfg, make_task_from(cfg))
    rows = tracker.under_scalings(make_model(cfg), 4, scalings_for(cfg)[1:])
    for view in (("linear", 2.0), ("dynamic", 2.0)):
        mine = [r for r in rows if (r["method"], r["factor"]) == view]
        assert [r["metric"] for r in mine] == [m for m in scaled if m != "probe_none"]
        count = next(r for r in mine if r["metric"] == "probe_count")
        assert count["value"] == cfg.ntk.probes and count["probe_length"] == 32
        assert count["group"] == "total" and count["step"] == 4
    with pytest.raises(ValueError, match="cross metric"):
        Metric(lambda k: 1.0, "train", False, scaled=True)
    with pytest.raises(ValueError, match="train rows"):
        Metric(lambda k: 1.0, "cross", False, drift=True)


@pytest.mark.slow  # ~27 s on 2 cores
def test_train_stage_writes_ntk_table_and_resumes(tmp_path):
    cfg = replace(_cfg("rope"), **{"train.checkpoint_every": 2})
    result = run_train_stage(to_dict(cfg), str(tmp_path))
    assert result["status"] == "done" and result["ntk_time_s"] > 0
    ntk = load(tmp_path).ntk.collect()
    assert sorted(set(ntk["step"])) == [0, 1, 2, 4]
    assert ntk.filter(pl.col("method") != "none").height == 0  # the scaling stages' rows
    for stage in eval_stages(cfg):
        assert run_stage(to_dict(cfg), str(tmp_path), stage.name)["status"] == "done"
    scaled = load(tmp_path).ntk.filter(pl.col("method") != "none").collect()
    assert set(zip(scaled["method"], scaled["factor"], strict=True)) == {
        ("linear", 2.0),
        ("dynamic", 2.0),
    }
    assert set(scaled["step"]) == {4}
    folder = tmp_path / "trials" / cfg.trial_id / "ntk"
    assert sorted(p.name for p in folder.glob("kernels_*.npz")) == [
        f"kernels_{s:08d}.npz" for s in (0, 1, 2, 4)
    ]
    with np.load(folder / "position_kernels.npz") as pk:
        assert pk["K_train"].shape == (16, 16) and pk["K_cross"].shape == (16, 32)
        assert pk["profile"].shape == (32,)
    # a tracker built on the same folder restores K_0 for drift after a resume, and the
    # step-0 outputs f_0 of the probes and cross / tail kernels for the output metrics
    tracker = NTKTracker(cfg, make_task_from(cfg), folder.parent)
    with np.load(folder / "kernels_00000000.npz") as k0:
        for key in ("train/total", "out/train", "out32", "cross32/total", "tail32/total"):
            np.testing.assert_array_equal(tracker.initial[key], k0[key])
    assert tracker.initial["out/train"].shape == (3, 1)
    assert tracker.initial["out32"].shape == (3, 2, 1)
    assert tracker.previous is not None and tracker.previous[0] == 4
    from rope_lab.trial.checkpoint import load_model

    model4 = load_model(folder.parent / "model.eqx", make_model(cfg))
    resumed = {(r["metric"], r["probe_length"]): r["value"] for r in tracker.measure(model4, 4)}
    written = ntk.filter((pl.col("step") == 4) & (pl.col("group") == "total"))
    for metric in ("tail_movement", "kernel_prediction_error_init", "kernel_tail_collapse"):
        (value,) = written.filter(pl.col("metric") == metric)["value"].to_list()
        assert resumed[(metric, 32)] == pytest.approx(value, rel=1e-6)


def test_a_resumed_tracker_takes_its_previous_kernels_from_before_the_resume_step(tmp_path):
    """A run stopped past its last checkpoint left kernels of steps it will measure again: the
    velocity of the resumed run's first step is against the kernels at or before its resume
    step (K_0 stays the reference for drift)."""
    cfg = _cfg("rope")
    folder = tmp_path / "ntk"
    folder.mkdir()
    for step in (0, 1, 2, 4, 8):
        np.savez(folder / f"kernels_{step:08d}.npz", **{"train/total": np.full((2, 2), step)})
    task = make_task_from(cfg)
    resumed = NTKTracker(cfg, task, tmp_path, resume_step=5)
    assert resumed.previous is not None and resumed.previous[0] == 4
    assert resumed.previous[1]["train/total"][0, 0] == 4
    assert resumed.initial["train/total"][0, 0] == 0
    assert NTKTracker(cfg, task, tmp_path).previous[0] == 8  # without it: the last file


@pytest.mark.slow  # ~19 s per encoding
@pytest.mark.parametrize("kind", ["learned", "alibi"])
def test_padding_probes_to_the_longest_changes_no_metric(kind):
    """The model is causal: probes padded to the longest probe length (one compiled program)
    give the same rows as probes run at their own lengths."""
    cfg = _cfg(kind, **{"ntk.probe_multipliers": (2.0, 3.0)})
    model = make_model(cfg)
    rows = {}
    for pad in (True, False):
        c = replace(cfg, **{"ntk.pad_to_longest": pad})
        tracker = NTKTracker(c, make_task_from(c))
        out = tracker.measure(model, 0) + tracker.shift_invariance(model, 0)
        rows[pad] = {(r["metric"], r["probe_length"], r["group"]): r["value"] for r in out}
        position = tracker.position_kernels(model)
        rows[pad] |= {("K_cross", 0, str(i)): v for i, v in enumerate(position["K_cross"].ravel())}
    assert rows[True].keys() == rows[False].keys()
    for key, value in rows[False].items():
        assert rows[True][key] == pytest.approx(value, rel=2e-3, abs=1e-5), key

"""The tail kernel at initialisation (`rope_lab.ntk.kernel_map`): a law of the encodings that act
only on attention scores, on constant probes, and the rows' shape."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rope_lab.model.factory import make_model
from rope_lab.ntk.kernel_map import COLLAPSE, MAP_METRICS, measure_at_init, target_collapse
from rope_lab.ntk.probes import target_values
from rope_lab.ntk.tracking import NTKTracker
from rope_lab.trial.train import make_task_from
from tests.helpers import tiny_trial

L, LONG = 6, 18


def tiny(kind: str, *, depth: int = 1, nngp: int = 0):
    cfg = tiny_trial(kind, width=16, depth=depth, length=L, steps=0)
    ntk = replace(
        cfg.ntk, probes=3, probe_multipliers=(LONG / L,), steps=(0,), nngp_samples=nngp,
        pad_to_longest=True,
    )  # fmt: skip
    return replace(cfg, ntk=ntk)


def constant_probe_kernel(kind: str, depth: int = 1) -> tuple[dict[str, float], float | None]:
    """Total-kernel metrics and the target collapse with the long probes one repeated token."""
    cfg = tiny(kind, depth=depth)
    tracker = NTKTracker(cfg, make_task_from(cfg))
    tracker.probes.long[LONG] = np.full((3, LONG), 5, dtype=tracker.probes.long[LONG].dtype)
    rows = tracker.measure(make_model(cfg), 0)
    value = {r["metric"]: r["value"] for r in rows if r["group"] == "total"}
    y = target_values(cfg, tracker.probes, tracker.output)
    return value, target_collapse(tracker.initial, y, LONG, L, cfg.ntk.ridge)


@pytest.mark.parametrize(
    ("kind", "depth"),
    [("none", 1), pytest.param("rope", 2, marks=pytest.mark.slow),
     pytest.param("alibi", 1, marks=pytest.mark.slow)],
)  # fmt: skip
def test_score_only_encodings_cannot_tell_the_tail_of_a_constant_probe_from_its_head(kind, depth):
    """NoPE, RoPE and ALiBi touch only the attention scores: on a probe of one repeated token
    every value vector is the same, so any attention pattern returns it, and by induction over
    blocks every position's output and gradient are equal. The tail's gradient is then n_T / n_H
    times the head's: the tail cosine equals the in-range one and the kernel predicts the same
    movement per position in the tail as in range (ratio exactly 1), at any depth."""
    value, collapse = constant_probe_kernel(kind, depth)
    assert value["tail_cos_mean"] == pytest.approx(value["head_cos_mean"], abs=1e-5)
    assert collapse == pytest.approx(1.0, abs=1e-4)


def test_an_additive_encoding_tells_them_apart():
    """Sinusoidal embeddings are added to the input: positions differ, the ratio is not 1."""
    value, collapse = constant_probe_kernel("sinusoidal")
    assert collapse is not None and abs(collapse - 1.0) > 1e-2
    assert abs(value["tail_cos_mean"] - value["head_cos_mean"]) > 1e-3


@pytest.mark.parametrize("nngp", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_rows_per_length_and_kernel(nngp):
    """One row per long length and kernel, the ratio length / L_train, the collapse NTK-only."""
    rows = measure_at_init(tiny("alibi", nngp=nngp))
    kernels = [("ntk", LONG / L), ("nngp", LONG / L)][: 1 + (nngp > 0)]
    assert [(r["kernel"], r["ratio"]) for r in rows] == kernels
    assert all(r[m] is not None for r in rows for m in MAP_METRICS)
    assert rows[0][COLLAPSE] is not None and all(r[COLLAPSE] is None for r in rows[1:])
    assert rows[0]["encoding"] == "alibi" and rows[0]["depth"] == 1

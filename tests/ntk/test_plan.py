"""`rope_lab.ntk.plan` lists exactly the gradient passes NTK tracking runs (the sweep plan's NTK
FLOPs are computed from it)."""

import math
from collections import Counter

import pytest

import rope_lab.ntk.tracking as tracking
from rope_lab.config import replace
from rope_lab.ntk.plan import gradient_passes
from rope_lab.trial.pipeline import run_trial_stages
from tests.helpers import tiny_trial


@pytest.mark.slow
@pytest.mark.parametrize("pad", [False, True])
def test_listed_passes_are_the_tracked_ones(tmp_path, monkeypatch, pad):
    cfg = replace(
        tiny_trial("rope", steps=4),
        **{
            "ntk.probes": 3,
            "ntk.chunk_size": 2,
            "ntk.probe_multipliers": (2.0,),
            "ntk.pad_to_longest": pad,
            "eval.factors": (2.0,),
        },
    )
    seen: Counter = Counter()
    real = tracking.gradient_features

    def counting(model, tokens, *, masks=None, chunk_size=None, **kw):
        n, length = tokens.shape
        rows = 1 if masks is None or masks.ndim < 2 else masks.shape[-2]
        chunk = min(chunk_size or n, n)
        seen[(math.ceil(n / chunk) * chunk, length, rows)] += 1
        return real(model, tokens, masks=masks, chunk_size=chunk_size, **kw)

    monkeypatch.setattr(tracking, "gradient_features", counting)
    status, _ = run_trial_stages(cfg, tmp_path)  # training, then the scaling stages' passes
    assert status == "done"
    listed: Counter = Counter()
    for g in gradient_passes(cfg):
        listed[(g.sequences, g.length, g.rows)] += g.count
    assert seen == listed

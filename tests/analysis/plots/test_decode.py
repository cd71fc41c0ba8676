"""The decode plot: one panel per cache protocol next to teacher forcing."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rope_lab.analysis.query import QueryError
from rope_lab.results import append_rows, mark_success, trial_dir, write_trial_row
from tests.analysis.plots.synthetic import data_axes, png_ok

PROTOCOLS = ("prefill_fixed", "per_step_stale")


def make_decode_store(root: Path) -> Path:
    """Two passkey trials (rope with dynamic x4, alibi) with teacher-forced rows, decode rows
    under two protocols, and a fine-tuned rope row the plot must leave out."""
    run = root / "dec"
    for kind in ("rope", "alibi"):
        folder = trial_dir(run, f"passkey-{kind}")
        config = {"model.position.kind": kind, "task.name": "passkey", "train.length": 16,
                  "train.seed": 0, "model.width": 32, "model.position.rope.scaling": "default",
                  "model.position.rope.factor": 1.0}  # fmt: skip
        write_trial_row(folder, {"status": "done", "sweep": "dec"}, config)
        scalings = [("default", 1.0), ("dynamic", 4.0)] if kind == "rope" else [("none", 1.0)]
        rows = []
        for method, factor in scalings:
            for length in (16, 32, 64):
                base = {"step": 10, "method": method, "factor": factor, "length": length}
                em = 0.9 if length == 16 else 0.2
                rows.append({**base, "finetune_steps": 0, "exact_match": em, "accuracy": em})
                decoded = PROTOCOLS if method == "dynamic" else ("any",)
                rows += [{**base, "finetune_steps": 0, "exact_match": em / (1 + i),
                          "accuracy": em, "mode": "decode", "protocol": p}
                         for i, p in enumerate(decoded)]  # fmt: skip
                if method == "dynamic":
                    rows.append({**base, "finetune_steps": 5, "exact_match": 1.0, "accuracy": 1.0})
        append_rows(folder, "eval", rows, segment="eval")
        mark_success(folder)
    return run


def test_panels_per_protocol_and_teacher_forcing_of_the_same_models(tmp_path):
    from rope_lab.analysis import plots
    from rope_lab.analysis.plots.decode import TEACHER_FORCED, decode_frame

    run = make_decode_store(tmp_path)
    frame = decode_frame(run)
    assert set(frame["protocol"]) == {TEACHER_FORCED, *PROTOCOLS}
    # rows decoded once ("any") appear under each protocol: 3 scalings x 3 lengths per panel
    for p in PROTOCOLS:
        assert frame.filter(frame["protocol"] == p).height == 3 * 3
    forced = frame.filter(frame["protocol"] == TEACHER_FORCED)
    assert set(forced["finetune_steps"]) == {0} and forced.height == 3 * 3  # 3 scalings x 3
    out = tmp_path / "decode.png"
    fig = plots.plot("decode", run, out=out)
    png_ok(out)
    titles = {ax.get_title() for ax in data_axes(fig)}
    assert titles == {f"protocol {p}" for p in (TEACHER_FORCED, *PROTOCOLS)}


def test_runs_without_decode_rows_say_how_to_get_them(tmp_path):
    from rope_lab.analysis import plots
    from rope_lab.results import load

    run = make_decode_store(tmp_path)
    for folder in (run / "trials").iterdir():  # the same runs with their decode rows dropped
        eval_file = folder / "eval" / "eval.parquet"
        rows = (
            load(run)
            .eval.collect()
            .filter((pl.col("trial_id") == folder.name) & pl.col("mode").is_null())
        )
        append_rows(folder, "eval", rows, segment="eval")
        assert eval_file.exists()
    with pytest.raises(QueryError, match=r"eval\.decode\.protocols"):
        plots.plot("decode", run)

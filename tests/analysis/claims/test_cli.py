"""`rope-lab claims` on a results store written through the store's own API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rope_lab.cli import main
from rope_lab.results import append_rows, trial_dir, write_trial_row
from tests.analysis.claims.common import trial_rows

RESULT_KEYS = ("step", "method", "factor", "finetune_steps", "length", "loss", "accuracy")


def write_store(run: Path) -> Path:
    """RoPE x 2 seeds (as trained and dynamic x4), ALiBi and learned x 2 seeds, copy task."""
    curves = {
        "rope": {1: 1.0, 2: 2.0, 4: 3.0},
        "alibi": {1: 1.0, 2: 1.0, 4: 1.01},
        "learned": {1: 1.0, 2: 4.0, 4: 6.0},
    }
    for kind, curve in curves.items():
        for seed in (0, 1):
            rows = trial_rows(kind, seed, {r: v + 0.01 * seed for r, v in curve.items()})
            if kind == "rope":
                dyn = {1: 1.0 + 0.01 * seed, 2: 1.5, 4: 2.0}
                rows += trial_rows(kind, seed, dyn, method="dynamic", factor=4.0)
            first = rows[0]
            tid = f"{kind}-s{seed}"
            config = {k: v for k, v in first.items() if k.startswith(("model.", "train.", "task."))}
            write_trial_row(trial_dir(run, tid), {"status": "done"}, config)
            eval_rows = [{k: r[k] for k in RESULT_KEYS} for r in rows]
            append_rows(trial_dir(run, tid), "eval", eval_rows, segment="eval")
    return run


def test_claims_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_store(tmp_path / "run")
    assert main(["claims", str(run), "--format", "json"]) == 0
    verdicts = {(v["claim"], v["scope"]): v for v in json.loads(capsys.readouterr().out)}
    dyn = verdicts["dynamic_equals_direct", "copy"]
    assert dyn["verdict"] == "holds" and dyn["effect"] == 0.0
    order = verdicts["absolute_degrade_more", "copy @ 2x"]
    assert order["verdict"] == "holds"
    assert order["effect"] == pytest.approx(3.005 - (1.005 + 0.005) / 2)
    assert verdicts["zero_shot_ordering", "copy @ 4x"]["effect"] == pytest.approx(3.005 - 2.0)
    assert verdicts["alibi_flat", "copy to 4x"]["verdict"] == "holds"

    assert main(["claims", str(run), "--claim", "rope_between"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["claim", "scope", "verdict"]
    assert lines[2].split()[:5] == ["rope_between", "copy", "@", "4x", "holds"]
    assert lines[-1] == "1 holds, 0 fails, 0 inconclusive"

    # unnamed, the claims the store holds nothing for are one footer line, not rows
    assert main(["claims", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split()[0] for line in lines[2:-2]]
    assert len(rows) == 8 and "fire_beats_rope" not in rows and "alibi_flat" in rows
    assert lines[-2] == "7 holds, 1 fails, 0 inconclusive"
    left = lines[-1]
    assert left.startswith("left out: 39 inconclusive rows with nothing to read in these runs")
    assert "fire_beats_rope" in left and "alibi_flat," not in left
    assert main(["claims", str(run), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 8

    out = tmp_path / "claims.md"
    assert main(["claims", str(run), "--format", "md", "--output", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("| claim | scope | verdict |") and "Press et al. 2022" in text


def test_claims_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_store(tmp_path / "run")
    assert main(["claims", str(run), "--claim", "alibi_flatt"]) == 1
    err = capsys.readouterr().err
    assert "unknown claim 'alibi_flatt' (did you mean 'alibi_flat'?)" in err
    assert main(["claims", str(tmp_path / "nowhere")]) == 1
    assert "rope-lab: error:" in capsys.readouterr().err


def test_nngp_rows_reach_the_nngp_claim_from_a_store(tmp_path: Path) -> None:
    """Loaded from disk, NNGP rows (`kernel: nngp`) reach the claim that reads them, and the
    NTK claims keep reading only the NTK's."""
    from rope_lab.analysis.claims import judge

    run = write_store(tmp_path / "run")
    for seed in (0, 1):
        ntk = {2: 0.8, 4: 0.4}
        nngp = {2: 0.9, 4: 0.85}
        rows = [
            {"step": 0, "probe_length": 16 * r, "group": "total", "metric": "tail_cos_mean",
             "value": v, "method": "none", "factor": 1.0, "kernel": kernel}
            for kernel, values in (("ntk", ntk), ("nngp", nngp)) for r, v in values.items()
        ]  # fmt: skip
        append_rows(trial_dir(run, f"rope-s{seed}"), "ntk", rows, segment="ntk")
    (v,) = judge(run, ["nngp_stabler_than_ntk"])
    assert v.numbers == {"ntk": pytest.approx(0.4), "nngp": pytest.approx(0.05)}
    assert v.verdict == "holds"


def test_claims_on_a_run_without_trials_or_with_a_damaged_segment_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    (empty / "trials").mkdir(parents=True)
    assert main(["claims", str(empty)]) == 1
    assert capsys.readouterr().err == (
        f"rope-lab: error: no trials in {empty} (nothing to judge: run a sweep into it first)\n"
    )
    run = write_store(tmp_path / "run")
    segment = trial_dir(run, "alibi-s1") / "eval" / "eval.parquet"
    segment.write_bytes(segment.read_bytes()[:-8])
    assert main(["claims", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"rope-lab: error: {segment} is not a readable Parquet file")
    assert err.endswith("; delete it and rerun the sweep to recompute it\n")
    assert err.count("\n") == 1

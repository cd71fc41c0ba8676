"""The one-page summary of a sweep."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from tests.analysis.plots.synthetic import data_axes


def test_summary_dashboard(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["summary"][0]
    *axes, _claims = data_axes(fig)
    assert len(axes) == 9  # 6 eval panels + 3 ntk panels (then the claims panel)
    titles = [ax.get_title() for ax in axes]
    assert any(t.startswith("accuracy vs length") for t in titles)
    assert any(t.startswith("longest length keeping") for t in titles)
    assert any("drift" in t for t in titles)


def test_summary_ends_with_the_claims_verdicts(
    rendered: dict[str, tuple[Figure, Path]], store: Path
) -> None:
    """The last panel: the counts of `rope-lab claims` on the run, then one line per decided
    verdict with its effect."""
    from rope_lab.analysis.claims import judge

    claims = data_axes(rendered["summary"][0])[-1]
    verdicts = judge(store)
    counts = [sum(v.verdict == k for v in verdicts) for k in ("holds", "fails", "inconclusive")]
    assert claims.get_title(loc="left").startswith(
        "published claims on these runs: {} holds, {} fails, {} inconclusive".format(*counts)
    )
    text = "\n".join(t.get_text() for t in claims.texts)
    decided = [v for v in verdicts if v.verdict != "inconclusive"]
    assert len([line for line in text.splitlines() if line]) == min(len(decided), 32)
    for v in decided[:32]:
        assert f"{v.claim} ({v.scope}): effect {v.effect:.3g}" in text


def test_longest_length_panel_reads_each_task_by_its_metric(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rope_lab.analysis import plots
    from rope_lab.analysis import query as q
    from rope_lab.analysis.plots.dashboard import _kept

    assert _kept(["accuracy"], 0.9) == "≥ 90% of L_train accuracy"
    assert _kept(["loss"], 0.9) == "loss ≤ L_train loss / 0.9"
    assert _kept(["accuracy", "loss"], 0.8) == (
        "≥ 80% of L_train accuracy / loss ≤ L_train loss / 0.8"
    )
    monkeypatch.setattr(q, "default_metric", lambda task: "loss")  # as for an LM task
    titles = [ax.get_title() for ax in data_axes(plots.summary(store))]
    assert "longest length keeping loss ≤ L_train loss / 0.9" in titles


def test_tasks_are_never_pooled_in_one_curve(store: Path) -> None:
    """With two tasks (here seed 1's trials relabelled as a byte LM), each task's metric vs
    length gets its own panel, and every point of the LM's loss panel is one of the LM
    trials' own losses, not a mean over both tasks."""
    import numpy as np
    import polars as pl

    from rope_lab.analysis import plots
    from rope_lab.analysis.query import results_of

    res = results_of(store)
    task = pl.when(pl.col("train.seed") == 1).then(pl.lit("lm_text")).otherwise(pl.col("task.name"))
    relabelled = res.__class__(
        trials=res.trials.with_columns(task.alias("task.name")),
        train=res.train,
        eval=res.eval,
        ntk=res.ntk,
        run_dirs=res.run_dirs,
    )
    axes = data_axes(plots.summary(relabelled))
    titles = [ax.get_title() for ax in axes]
    assert "loss vs length · lm_text (width 64)" in titles
    assert "accuracy vs length · passkey (width 64)" in titles
    lm = axes[titles.index("loss vs length · lm_text (width 64)")]
    ev = relabelled.eval_with_config.filter(
        pl.col("position_bucket").is_null() & (pl.col("model.width") == 64)
    ).collect()
    own = set(np.round(ev.filter(pl.col("task.name") == "lm_text")["loss"].to_numpy(), 9))
    curves = [line for line in lm.get_lines() if len(set(line.get_xdata())) > 1]  # not L_train
    drawn = {round(float(y), 9) for line in curves for y in line.get_ydata() if np.isfinite(y)}
    assert drawn and drawn <= own


def test_a_text_model_summary_reads_bits_per_byte(store: Path) -> None:
    """The synthetic store's seed 0 as a BPE model's (4 bytes a token: bits per byte = loss /
    (4 ln 2)):
    its length, position and width panels draw bits per byte, each point one of the rows'
    own; the training loss stays in nats per token (train rows have no byte counts)."""
    import math

    import numpy as np
    import polars as pl

    from rope_lab.analysis import plots
    from rope_lab.analysis.query import results_of

    res = results_of(store)
    bpb = (pl.col("loss") / (4 * math.log(2))).alias("bits_per_byte")
    seed0 = res.trials.filter(pl.col("train.seed") == 0)  # one seed: points are rows, not means
    ids = seed0.select("trial_id").collect()["trial_id"].to_list()
    text = res.__class__(
        trials=seed0.with_columns(pl.lit("lm_tokens").alias("task.name")),
        train=res.train.filter(pl.col("trial_id").is_in(ids)),
        eval=res.eval.filter(pl.col("trial_id").is_in(ids)).with_columns(bpb),
        ntk=res.ntk.filter(pl.col("trial_id").is_in(ids)),
        run_dirs=res.run_dirs,
    )
    axes = data_axes(plots.summary(text))
    titles = [ax.get_title() for ax in axes]
    assert "bits_per_byte vs length (width 64)" in titles
    assert "accuracy vs length (width 64)" in titles
    assert "bits_per_byte by position at the longest length (width 64)" in titles
    assert "bits_per_byte at L_train (PE as trained) vs width" in titles
    assert "training loss (dash = width)" in titles
    assert "longest length keeping bits_per_byte ≤ L_train bits_per_byte / 0.9" in titles
    ev = text.eval_with_config.filter(pl.col("model.width") == 64).collect()
    own = set(np.round(ev["loss"].to_numpy() / (4 * math.log(2)), 9))
    for title in ("bits_per_byte vs length (width 64)",
                  "bits_per_byte by position at the longest length (width 64)"):  # fmt: skip
        ax = axes[titles.index(title)]
        curves = [line for line in ax.get_lines() if len(set(line.get_xdata())) > 1]
        drawn = {round(float(y), 9) for line in curves for y in line.get_ydata() if np.isfinite(y)}
        assert drawn and drawn <= own, title
    ax = axes[titles.index("bits_per_byte vs length (width 64)")]
    assert ax.get_ylabel() == "bits per byte (scored text)"

"""Claims of the kernel view as a causal test (docs/science.md): the linearised twin of a
network (``train.regime: lazy``) against the network itself, kernel regression against the
network's outputs past L_train, the NNGP against the NTK, and the convolutional baseline's
kernel.

In the kernel regime the trained function is f_0 + sum_i a_i Theta(x, x_i): where the kernel
between a long input and the training inputs vanishes, the prediction there falls back to the
initial output. A lazy trial is the variant of its network with ``" +lazy"``
(:data:`LAZY_SUFFIX`, ``analysis.curve_labels``); NNGP rows are NTK-table rows with
``kernel == "nngp"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import polars as pl

from rope_lab.analysis.claims.arms import arm, plain_variants
from rope_lab.analysis.claims.base import (
    Claim,
    Evidence,
    Stat,
    Verdict,
    claim,
    judge_arms,
    judge_gap,
    missing,
    per_seed,
)
from rope_lab.analysis.claims.kernels import (
    SHIFT_TOLERANCE,
    TAIL_RATIO,
    ntk_metric,
    ntk_tasks,
    width_slopes,
)
from rope_lab.analysis.claims.measures import (
    ratio_at_most,
    rise_past_train,
    rows_at_train_length,
)
from rope_lab.analysis.curve_labels import LAZY_SUFFIX

FAMILY = "model.family"
CNN = "cnn"
KERNEL = "kernel"  # NTK-table column: "ntk" (default) or "nngp"
TAIL_METRIC = "tail_cos_mean"
MOVEMENT_METRIC = "tail_movement"
PREDICTION_METRIC = "kernel_prediction_error_init"
MIN_ENCODINGS = 3  # a rank correlation over fewer says nothing
MATCH_TOLERANCE = 0.02  # nats: pairs match at L_train within it (`train.match.tolerance`'s default)


def _lazy_pairs(ev: Evidence, task: str) -> dict[str, str]:
    """Plain encodings with a lazy twin in ``task``: network variant -> lazy variant."""
    variants = ev.variants(task)
    rows = ev.eval.filter(pl.col("trained") & (pl.col("task") == task))
    plain = set(plain_variants(rows)) if not rows.is_empty() else set()
    return {v: v + LAZY_SUFFIX for v in sorted(plain) if v + LAZY_SUFFIX in variants}


def _ratio(ev: Evidence, task: str) -> float | None:
    return ratio_at_most(ev, task, TAIL_RATIO)


def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of ``values`` (n,), ties given their average rank."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="stable")
    r = np.empty(x.size)
    r[order] = np.arange(1, x.size + 1)
    for value in np.unique(x):
        tied = x == value
        r[tied] = r[tied].mean()
    return r


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equal-length sequences (NaN when one is constant)."""
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
    return float((ra * rb).sum() / denom) if denom > 0 else math.nan


def _correlation(encodings: Sequence[str]) -> Stat:
    """Spearman correlation over ``encodings`` of their ``rise:`` and ``cos:`` arm means."""

    def stat(m: Mapping[str, float]) -> float:
        return spearman([m[f"rise:{e}"] for e in encodings], [m[f"cos:{e}"] for e in encodings])

    return stat


def _last_at_probe(ev: Evidence, task: str, metric: str, ratio: float) -> pl.DataFrame:
    rows = ntk_metric(ev, task, metric)
    if rows.is_empty():
        return rows
    rows = rows.filter((pl.col("probe_length") - pl.col("train.length") * ratio).abs() < 0.5)
    return rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))


@claim(
    "lazy_collapses_where_kernel_vanishes",
    statement=f"across encodings, the linearised models' loss rise past L_train (at the largest "
    f"evaluated ratio <= {TAIL_RATIO:g}x) is larger where their tail-kernel cosine at the "
    f"{TAIL_RATIO:g}x probe is smaller: effect = Spearman's rank correlation of the two over "
    f"encodings (< 0 holds; >= {MIN_ENCODINGS} encodings)",
    source="source documents: f(x) = f_0(x) + sum_i a_i Theta(x, x_i), so a vanishing cross "
    "kernel leaves the long input at its initial output (docs/science.md, kernel regime)",
    order=300,
)
def lazy_collapses_where_kernel_vanishes(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Rank correlation over encodings of lazy loss rise vs lazy tail cosine, seeds resampled
    per arm."""
    out = []
    for task in ev.tasks():
        ratio, pairs = _ratio(ev, task), _lazy_pairs(ev, task)
        cos = _last_at_probe(ev, task, TAIL_METRIC, TAIL_RATIO)
        if ratio is None or cos.is_empty():
            needs = "needs lazy trials evaluated past L_train with NTK tracking"
            out.append(missing(meta, task, needs))
            continue
        rise = rise_past_train(ev, task, ratio)
        arms: dict[str, list[float]] = {}
        for lazy in pairs.values():
            r, c = arm(rise, [lazy]), arm(cos, [lazy])
            if r and c:
                arms[f"rise:{lazy}"], arms[f"cos:{lazy}"] = r, c
        encodings = [k.removeprefix("rise:") for k in arms if k.startswith("rise:")]
        scope = f"{task} @ {ratio:g}x"
        if len(encodings) < MIN_ENCODINGS:
            reason = f"needs >= {MIN_ENCODINGS} encodings with lazy trials and tail-kernel rows"
            out.append(missing(meta, scope, reason))
            continue
        stat = _correlation(encodings)
        out.append(judge_arms(ev, meta, scope, arms, stat, threshold=0.0, direction="<"))
    return out


def _twin_rises(
    ev: Evidence, meta: Claim, out: list[Verdict]
) -> Iterator[tuple[str, float, pl.DataFrame, str, str]]:
    """(task, ratio, rise rows, network variant, twin variant) for each network with a lazy
    twin evaluated past L_train; a task without one gets its missing verdict in ``out``."""
    for task in ev.tasks():
        ratio, pairs = _ratio(ev, task), _lazy_pairs(ev, task)
        if ratio is None or not pairs:
            out.append(missing(meta, task, "needs lazy and rich trials evaluated past L_train"))
            continue
        rise = rise_past_train(ev, task, ratio)
        for rich, lazy in pairs.items():
            yield task, ratio, rise, rich, lazy


@claim(
    "features_rescue_extrapolation",
    statement=f"per encoding, the network's loss rise past L_train (at the largest evaluated "
    f"ratio <= {TAIL_RATIO:g}x) is smaller than its linearised twin's: effect = "
    f"rise(lazy) - rise(network)",
    source="source documents, exercise 6.6: finite width (feature learning) may rescue what "
    "the kernel regime cannot extrapolate (docs/science.md)",
    order=310,
)
def features_rescue_extrapolation(ev: Evidence, meta: Claim) -> list[Verdict]:
    """rise(lazy) - rise(rich) > 0 per task and plain encoding with both."""
    out: list[Verdict] = []
    for task, ratio, rise, rich, lazy in _twin_rises(ev, meta, out):
        arms = {"lazy": arm(rise, [lazy]), "rich": arm(rise, [rich])}
        scope = f"{task} @ {ratio:g}x: {rich}"
        if not all(arms.values()):
            out.append(missing(meta, scope, "no rows past L_train"))
            continue
        out.append(judge_gap(ev, meta, scope, arms, "lazy", "rich"))
    return out


def _matched_pairs(ev: Evidence, task: str, rich: str, lazy: str) -> tuple[list, list, int]:
    """(lazy trial ids, rich trial ids, unmatched count) of the pairs of ``lazy`` and ``rich``
    trials equal but for ``train.regime`` and ``train.match`` whose losses at L_train differ by
    at most the lazy trial's ``train.match.tolerance`` (MATCH_TOLERANCE without one)."""
    rows = rows_at_train_length(ev, task)
    same = [
        c
        for c in rows.columns
        if c.startswith(("model.", "task.", "train."))
        and not c.startswith(("train.regime", "train.match."))
    ]
    if "train.match.tolerance" in rows.columns:
        tol = pl.col("train.match.tolerance").cast(pl.Float64).fill_null(MATCH_TOLERANCE)
    else:
        tol = pl.lit(MATCH_TOLERANCE)
    side = rows.select(
        [*same, "trial_id", "variant", pl.col("loss").cast(pl.Float64), tol.alias("tol")]
    )
    twins = side.filter(pl.col("variant") == lazy)
    nets = side.filter(pl.col("variant") == rich).drop("variant", "tol")
    pairs = twins.join(nets, on=same, how="inner", suffix="_rich", nulls_equal=True)
    close = (pl.col("loss") - pl.col("loss_rich")).abs() <= pl.col("tol")
    matched = pairs.filter(close)
    unmatched = pairs.height - matched.height
    return matched["trial_id"].to_list(), matched["trial_id_rich"].to_list(), unmatched


@claim(
    "features_rescue_extrapolation_matched",
    statement=f"per encoding, over pairs whose losses at L_train match within the twin's "
    f"train.match.tolerance, the network's loss rise past L_train (at the largest evaluated "
    f"ratio <= {TAIL_RATIO:g}x) is smaller than its linearised twin's: effect = "
    f"rise(lazy) - rise(network); unmatched pairs are counted in the scope, never judged",
    source="source documents, exercise 6.6, with the twin trained to its network's in-range "
    "loss (train.match) so the rise compares equally trained functions (docs/science.md)",
    order=315,
)
def features_rescue_extrapolation_matched(ev: Evidence, meta: Claim) -> list[Verdict]:
    """rise(lazy) - rise(rich) > 0 per task and plain encoding, matched pairs only."""
    out: list[Verdict] = []
    for task, ratio, rise, rich, lazy in _twin_rises(ev, meta, out):
        twins, nets, unmatched = _matched_pairs(ev, task, rich, lazy)
        scope = f"{task} @ {ratio:g}x: {rich} ({len(twins)} matched, {unmatched} unmatched)"
        arms = {
            "lazy": per_seed(rise.filter(pl.col("trial_id").is_in(twins))),
            "rich": per_seed(rise.filter(pl.col("trial_id").is_in(nets))),
        }
        if not all(arms.values()):
            out.append(missing(meta, scope, "no pair matched at L_train with rows past it"))
            continue
        out.append(judge_gap(ev, meta, scope, arms, "lazy", "rich"))
    return out


@claim(
    "kernel_predicts_network_at_width",
    statement="under the NTK parametrisation, the error of kernel regression with the initial "
    "kernel against the network's own outputs past L_train falls with width: effect = the "
    "log-log slope of the last step's error vs width (bootstrap over seeds)",
    source="Jacot et al. 2018, Lee et al. 2019: at infinite width the network trains as its "
    "initial NTK predicts (docs/science.md, kernel regime)",
    order=320,
)
def kernel_predicts_network_at_width(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Slope of log error vs log width < 0, per task and network variant with >= 2 widths."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = _last_at_probe(ev, task, PREDICTION_METRIC, TAIL_RATIO)
        if "model.parametrization" in rows.columns:
            rows = rows.filter(pl.col("model.parametrization") == "ntk")
        if not rows.is_empty():
            rows = rows.filter(~pl.col("variant").str.ends_with(LAZY_SUFFIX))
        if rows.is_empty():
            needs = f"needs NTK-parametrised networks with {PREDICTION_METRIC} rows"
            out.append(missing(meta, task, needs))
            continue
        out += width_slopes(ev, meta, task, rows, PREDICTION_METRIC)
    return out


@claim(
    "tail_outputs_stay_at_init",
    statement=f"through training, absolute encodings' outputs past L_train of {TAIL_RATIO:g}x "
    f"probes move less than their outputs in range (tail_movement < 1) and less than relative "
    f"encodings' do: effect = min(1 - movement(absolute), movement(relative) - "
    f"movement(absolute)) at the last step",
    source="source documents: where K_cross -> 0 the trained output stays at f_0 "
    "(docs/science.md, kernel regime)",
    order=330,
)
def tail_outputs_stay_at_init(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Mean tail_movement of plain absolute and relative networks at the 4x probe."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = _last_at_probe(ev, task, MOVEMENT_METRIC, TAIL_RATIO)
        absolute = plain_variants(rows, family="absolute")
        relative = plain_variants(rows, family="relative")
        if not absolute or not relative:
            needs = f"needs absolute and relative networks with {MOVEMENT_METRIC} rows"
            out.append(missing(meta, task, needs))
            continue
        arms = {"absolute": arm(rows, absolute), "relative": arm(rows, relative)}
        stat: Stat = lambda m: min(1.0 - m["absolute"], m["relative"] - m["absolute"])
        scope = f"{task} @ {TAIL_RATIO:g}x"
        out.append(judge_arms(ev, meta, scope, arms, stat, threshold=0.0, direction=">"))
    return out


def _drop(rows: pl.DataFrame) -> pl.DataFrame:
    """Per trial, value at its shortest probe past L_train minus value at its longest."""
    past = rows.filter(pl.col("probe_length") > pl.col("train.length"))
    first = past.filter(pl.col("probe_length") == pl.col("probe_length").min().over("trial_id"))
    last = past.filter(pl.col("probe_length") == pl.col("probe_length").max().over("trial_id"))
    both = first.join(last.select("trial_id", pl.col("value").alias("far")), on="trial_id")
    return both.with_columns((pl.col("value") - pl.col("far")).alias("value"))


@claim(
    "nngp_stabler_than_ntk",
    statement="at initialisation, the NNGP's tail cosine falls less from the shortest to the "
    "longest probe past L_train than the NTK's: effect = drop(NTK) - drop(NNGP), drop = "
    "tail_cos_mean at the shortest long probe minus at the longest, pooled over encodings",
    source="source documents, pitfall 1: the NNGP and the NTK are different kernels; the "
    "gradient terms of the NTK carry the position dependence (docs/science.md)",
    order=340,
)
def nngp_stabler_than_ntk(ev: Evidence, meta: Claim) -> list[Verdict]:
    """drop(ntk) - drop(nngp) > 0 per task, at step 0, over trials with both kernels."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = ntk_metric(ev, task, TAIL_METRIC, kernel=None)
        if rows.is_empty() or KERNEL not in rows.columns:
            out.append(missing(meta, task, "needs NNGP rows (ntk.nngp_samples > 0)"))
            continue
        rows = rows.filter(pl.col("step") == pl.col("step").min().over("trial_id"))
        kinds = pl.col(KERNEL).fill_null("ntk")
        nngp = _drop(rows.filter(kinds == "nngp"))
        with_nngp = nngp.get_column("trial_id").unique().to_list() if not nngp.is_empty() else []
        ntk = _drop(rows.filter((kinds == "ntk") & pl.col("trial_id").is_in(with_nngp)))
        arms = {"ntk": per_seed(ntk), "nngp": per_seed(nngp)}
        if not all(arms.values()):
            out.append(missing(meta, task, "needs NNGP and NTK rows at >= 2 probes past L_train"))
            continue
        out.append(judge_gap(ev, meta, task, arms, "ntk", "nngp"))
    return out


@claim(
    "cnn_kernel_shift_invariant",
    statement=f"the convolutional baseline's NTK is shift invariant to the tolerance the "
    f"relative encodings meet in `shift_invariance` ({SHIFT_TOLERANCE}): effect = "
    f"{SHIFT_TOLERANCE} - error(CNN) at the last step, relative encodings' errors reported",
    source="source documents, exercise 6.3: a convolution's kernel depends on relative "
    "offsets only (docs/science.md)",
    order=350,
)
def cnn_kernel_shift_invariant(ev: Evidence, meta: Claim) -> list[Verdict]:
    """The CNN's shift_invariance_error below the relative encodings' tolerance."""
    out = []
    for task in ntk_tasks(ev) or ev.tasks():
        rows = ntk_metric(ev, task, "shift_invariance_error")
        if rows.is_empty() or FAMILY not in rows.columns:
            out.append(missing(meta, task, "needs CNN trials with shift_invariance_error rows"))
            continue
        last = rows.filter(pl.col("step") == pl.col("step").max().over("trial_id"))
        cnn = last.filter(pl.col(FAMILY) == CNN)
        if cnn.is_empty():
            out.append(missing(meta, task, "needs CNN trials with shift_invariance_error rows"))
            continue
        networks = last.filter(pl.col(FAMILY).fill_null("transformer") != CNN)
        relative = plain_variants(networks, shift_invariant=True)
        arms = {CNN: per_seed(cnn), **{v: arm(networks, [v]) for v in relative}}
        margin: Stat = lambda m: SHIFT_TOLERANCE - m[CNN]
        out.append(judge_arms(ev, meta, task, arms, margin, threshold=0.0, direction=">"))
    return out

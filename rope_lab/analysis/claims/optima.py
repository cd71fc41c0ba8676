"""Claims about where an optimum lies: the best learning rate across widths
(`rope_lab.analysis.lr_transfer`) and the compute-optimal model size across evaluation lengths
(`rope_lab.analysis.isoflop`).

Both read the loss in nats per token of each task (one corpus and protocol per scope), as
trained, at the trials' last step.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from rope_lab.analysis.claims.base import Claim, Evidence, Verdict, claim, decide, missing
from rope_lab.analysis.isoflop import isoflop_tables
from rope_lab.analysis.lr_transfer import LR, WIDTH, lr_transfer_tables

PARAMETRIZATION = "model.parametrization"
RATIO = "length_ratio"
N_COLUMN = "n_params_non_embedding"
# |slope| of log lr* on log width below this counts as transfer: at 0.2 the best lr moves at
# most 2^0.2 = 1.15x per doubling of width (1.32x over a 4x range), well inside one step of a
# half-decade lr grid (3.16x), while the standard parametrisation under Adam is expected near -1
TRANSFER_TOLERANCE = 0.2
FAR_RATIO = 4.0  # the evaluation length (x L_train) compared with 1x for the optimal size


def _verdict(meta: Claim, scope: str, **fields: Any) -> Verdict:
    return Verdict(
        claim=meta.name, scope=scope, statement=meta.statement, source=meta.source, **fields
    )


def _trained(ev: Evidence, columns: tuple[str, ...]) -> pl.DataFrame:
    """The eval rows as trained with every column of ``columns`` and a loss (empty without)."""
    if any(c not in ev.eval.columns for c in columns):
        return pl.DataFrame()
    rows = ev.eval.filter(pl.col("trained") & pl.col("loss").is_not_null())
    return rows.filter(*(pl.col(c).is_not_null() for c in columns))


def _ci(lo: float | None, hi: float | None) -> str:
    return f"[{lo:.3g}, {hi:.3g}]"


def _judge_transfer(
    ev: Evidence, meta: Claim, scope: str, mup: dict[str, Any], sp: dict[str, Any]
) -> Verdict:
    """holds: muP's slope interval inside +-TRANSFER_TOLERANCE and SP's below 0; fails: muP's
    wholly outside the band or SP's wholly at or above 0; else inconclusive."""
    tol = TRANSFER_TOLERANCE
    seeds = min(mup["seeds"], sp["seeds"])
    numbers = {
        "mup_slope": mup["slope"],
        "sp_slope": sp["slope"],
        "sp_ci_low": sp["slope_ci_low"],
        "mup_replicates": float(mup["replicates"]),
        "sp_ci_high": sp["slope_ci_high"],
    }
    lo, hi, sp_lo, sp_hi = (
        mup["slope_ci_low"],
        mup["slope_ci_high"],
        sp["slope_ci_low"],
        sp["slope_ci_high"],
    )
    base = dict(effect=mup["slope"], threshold=tol, direction="|x| <", seeds=seeds, numbers=numbers)
    if seeds < ev.min_seeds or any(math.isnan(v) for v in (lo, hi, sp_lo, sp_hi)):
        reason = f"{seeds} seed(s) with a slope in every replicate; intervals need >= 2"
        return _verdict(
            meta, scope, verdict="inconclusive", ci_low=None, ci_high=None, reason=reason, **base
        )
    mup_band = -tol < lo and hi < tol
    mup_out = hi <= -tol or lo >= tol
    sp_falls = decide(sp_lo, sp_hi, 0.0, "<")
    if mup_band and sp_falls == "holds":
        verdict, reason = "holds", ""
    elif mup_out or sp_falls == "fails":
        verdict = "fails"
        reason = (
            f"muP's slope interval {_ci(lo, hi)} lies outside +-{tol:g}"
            if mup_out
            else f"SP's slope interval {_ci(sp_lo, sp_hi)} is not below 0"
        )
    else:
        verdict = "inconclusive"
        reason = f"muP's slope {_ci(lo, hi)}, SP's {_ci(sp_lo, sp_hi)}: not decided"
    return _verdict(meta, scope, verdict=verdict, ci_low=lo, ci_high=hi, reason=reason, **base)


@claim(
    "mup_transfers_learning_rate",
    statement="the optimal learning rate lr* (vertex of a parabola in log lr through the best "
    "lr and its neighbours, per width; refused when the best lr is at the edge of the grid) "
    "stays put as the model widens under muP and falls under the standard parametrisation: "
    "effect = slope of log lr* on log width under mup, per task and evaluated length ratio; "
    f"holds when its 95% interval (resampling seeds) lies within +-{TRANSFER_TOLERANCE:g} "
    f"(lr* moving at most 2^{TRANSFER_TOLERANCE:g} = 1.15x per doubling of width, below a "
    "half-decade lr grid's step) and SP's lies below 0",
    source="Yang et al. 2022 (Tensor Programs V: tuning large neural networks via zero-shot "
    "hyperparameter transfer): under muP the best lr is stable across widths; Everett et "
    "al. 2024 (Scaling exponents across parameterizations and optimizers): under the "
    "standard parametrisation with Adam it shrinks with width",
    order=182,
)
def mup_transfers_learning_rate(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task and ratio: muP's slope within the tolerance and SP's below 0."""
    needed = (LR, WIDTH, PARAMETRIZATION, RATIO)
    rows = _trained(ev, needed)
    if rows.is_empty():
        return [missing(meta, "all", f"needs eval rows with {', '.join(needed)} and a loss")]
    _, slopes = lr_transfer_tables(
        rows,
        y="loss",
        by=("task", PARAMETRIZATION, RATIO),
        n_boot=ev.n_boot,
        level=ev.level,
        seed=ev.seed,
    )
    out: list[Verdict] = []
    for (task, ratio), part in sorted(slopes.partition_by(["task", RATIO], as_dict=True).items()):
        scope = f"{task} @ {ratio:g}x"
        arms = {str(r[PARAMETRIZATION]): r for r in part.to_dicts()}
        absent = [p for p in ("mup", "sp") if p not in arms]
        if absent:
            out.append(missing(meta, scope, f"needs mup and sp trials; no {' or '.join(absent)}"))
            continue
        refused = [p for p in ("mup", "sp") if math.isnan(arms[p]["slope"])]
        if refused:
            out.append(missing(meta, scope, f"{refused[0]}: {arms[refused[0]]['error']}"))
            continue
        out.append(_judge_transfer(ev, meta, scope, arms["mup"], arms["sp"]))
    return out


@claim(
    "compute_optimal_size_depends_on_length",
    statement=f"the compute-optimal model size grows faster with compute when the loss is read "
    f"at {FAR_RATIO:g}x L_train than at 1x: the frontier exponent a of N* ∝ C^a (isoFLOP "
    f"profiles) at {FAR_RATIO:g}x exceeds the one at 1x, per task and encoding; effect = "
    f"a({FAR_RATIO:g}x) - a(1x); holds when their 95% intervals (resampling seeds) are "
    "disjoint with the far one above, fails when disjoint the other way",
    source="Hoffmann et al. 2022 (Training compute-optimal large language models), approach "
    "2, for the isoFLOP frontier; whether it moves with the evaluation length is rope_lab's "
    "question",
    order=183,
)
def compute_optimal_size_depends_on_length(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task and label: a(4x) against a(1x), by their intervals."""
    needed = (N_COLUMN, "tokens_seen", "label", RATIO)
    rows = _trained(ev, needed)
    if rows.is_empty():
        return [missing(meta, "all", f"needs eval rows with {', '.join(needed)} and a loss")]
    rows = rows.filter(pl.col(RATIO).is_in([1.0, FAR_RATIO]))
    _, frontier = isoflop_tables(
        rows,
        n=N_COLUMN,
        d="tokens_seen",
        y="loss",
        by=("task", "label", RATIO),
        n_boot=ev.n_boot,
        level=ev.level,
        seed=ev.seed,
    )
    out: list[Verdict] = []
    groups = frontier.partition_by(["task", "label"], as_dict=True)
    for (task, label), part in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        scope = f"{task}: {label}"
        at = {float(r[RATIO]): r for r in part.to_dicts()}
        absent = [f"{r:g}x" for r in (1.0, FAR_RATIO) if r not in at]
        if absent:
            out.append(
                missing(
                    meta,
                    scope,
                    f"needs eval rows at 1x and {FAR_RATIO:g}x; none at {' or '.join(absent)}",
                )
            )
            continue
        near, far = at[1.0], at[FAR_RATIO]
        broken = [(r, f) for r, f in (("1x", near), (f"{FAR_RATIO:g}x", far)) if f["error"]]
        if broken:
            out.append(
                missing(meta, scope, f"no frontier at {broken[0][0]}: {broken[0][1]['error']}")
            )
            continue
        effect = far["a"] - near["a"]
        numbers = {
            "a_1x": near["a"],
            "a_far": far["a"],
            "a_1x_ci_low": near["a_ci_low"],
            "a_1x_ci_high": near["a_ci_high"],
            "profiles": float(near["n_profiles"]),
        }
        bounds = (near["a_ci_low"], near["a_ci_high"], far["a_ci_low"], far["a_ci_high"])
        if any(v is None or math.isnan(v) for v in bounds):
            out.append(
                _verdict(
                    meta,
                    scope,
                    verdict="inconclusive",
                    effect=effect,
                    ci_low=None,
                    ci_high=None,
                    threshold=0.0,
                    direction=">",
                    seeds=0,
                    numbers=numbers,
                    reason="no interval: no N with two seeds",
                )
            )
            continue
        # the difference's range when each exponent may be anywhere in its interval: above 0
        # exactly when the intervals are disjoint with the far one above
        lo, hi = far["a_ci_low"] - near["a_ci_high"], far["a_ci_high"] - near["a_ci_low"]
        verdict = decide(lo, hi, 0.0, ">")
        reason = (
            ""
            if verdict != "inconclusive"
            else (
                f"the intervals of a overlap: 1x {_ci(near['a_ci_low'], near['a_ci_high'])}, "
                f"{FAR_RATIO:g}x {_ci(far['a_ci_low'], far['a_ci_high'])}"
            )
        )
        seeds = int(rows.filter(pl.col("task") == task).get_column("train.seed").n_unique())
        out.append(
            _verdict(
                meta,
                scope,
                verdict=verdict,
                effect=effect,
                ci_low=lo,
                ci_high=hi,
                threshold=0.0,
                direction=">",
                seeds=seeds,
                numbers=numbers,
                reason=reason,
            )
        )
    return out

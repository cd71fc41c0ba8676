"""Claims about loss laws across length ratios (`rope_lab.analysis.ratio_laws`): does scale
close the extrapolation gap, and does a law fitted on smaller models predict the largest?

Both read the loss in nats per token of each task (one corpus per scope) per curve label (the
encoding with its scaling or remap method and fine-tuning), against non-embedding parameters.
"""

from __future__ import annotations

import polars as pl

from rope_lab.analysis.claims.base import Claim, Evidence, Verdict, claim, decide, missing
from rope_lab.analysis.gap_law import fit_gap_law
from rope_lab.analysis.ratio_laws import RATIO, ratio_law_table, ratio_points, trial_gaps

N_COLUMN = "n_params_non_embedding"
HELD_OUT_TOLERANCE = 0.05  # largest |predicted / observed - 1| of the held-out models
# gamma must lie below -FLAT: a gap equal at every N fits a slope of ~1e-17, float noise
FLAT = 1e-9


NEEDED = (N_COLUMN, "label", RATIO)


def _groups(ev: Evidence, task: str) -> dict[str, pl.DataFrame]:
    """The eval rows of ``task`` with a loss and N, per label (none without those columns)."""
    if any(c not in ev.eval.columns for c in NEEDED):
        return {}
    rows = ev.eval.filter(
        (pl.col("task") == task) & pl.col(N_COLUMN).is_not_null() & pl.col("loss").is_not_null()
    )
    return {str(k[0]): v for k, v in rows.partition_by("label", as_dict=True).items()}


def _verdict(
    meta: Claim,
    scope: str,
    effect: float,
    interval: tuple[float | None, float | None],
    threshold: float,
    seeds: int,
    numbers: dict[str, float],
    reason: str,
) -> Verdict:
    """``holds`` when [lo, hi] lies below ``threshold`` (lo = hi = effect: the point value)."""
    lo, hi = interval
    verdict = decide(lo, hi, threshold, "<")
    if verdict == "inconclusive" and not reason:
        reason = f"the interval [{lo:.4g}, {hi:.4g}] straddles {threshold:g}"
    if lo == hi == effect:
        lo = hi = None  # judged on the point value: no interval to report
    return Verdict(
        claim=meta.name, scope=scope, statement=meta.statement, verdict=verdict, effect=effect,
        ci_low=lo, ci_high=hi, threshold=threshold, direction="<", seeds=seeds,
        numbers=numbers, source=meta.source, reason=reason,
    )  # fmt: skip


def _labelled(ev: Evidence, meta: Claim, out: list[Verdict]):
    """(task, label, eval rows) of each group; a task with none gets a `missing` verdict."""
    for task in ev.tasks():
        groups = _groups(ev, task)
        if not groups:
            out.append(missing(meta, task, f"needs eval rows with {', '.join(NEEDED)} and a loss"))
        for label, rows in sorted(groups.items()):
            yield task, label, rows


@claim(
    "extrapolation_gap_shrinks_with_scale",
    statement="the extrapolation gap G(N, r) = loss at r x L_train minus loss at L_train, per "
    "trial, shrinks with non-embedding parameters N: G = g N^gamma fitted by least squares in "
    "log-log, effect = gamma at each evaluated ratio r > 1, per encoding and method; holds "
    f"when its 95% interval (resampling seeds) lies below 0 (below -{FLAT:g}: a flat gap's "
    "float noise does not count); a gap <= 0 refuses the fit",
    source="Anil et al. 2022 (Exploring length generalization in large language models): "
    "scaling the model alone did not fix length generalization; Hoffmann et al. 2022 for "
    "the power law in N",
    order=180,
)
def extrapolation_gap_shrinks_with_scale(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, label and ratio r > 1: gamma of the gap law below 0 (its whole interval)."""
    out: list[Verdict] = []
    for task, label, rows in _labelled(ev, meta, out):
        points = ratio_points(rows, n=N_COLUMN, d="tokens_seen", y="loss", by=(),
                              seed_col="train.seed")  # fmt: skip
        ratios = sorted(r for r in set(points.get_column(RATIO).to_list()) if r > 1)
        if not ratios or points.filter(pl.col(RATIO) == 1.0).is_empty():
            out.append(missing(meta, f"{task}: {label}", "needs losses at 1x and past it"))
        for r in ratios:
            scope = f"{task}: {label} @ {r:g}x"
            ns, gap, seeds = trial_gaps(points, r, n=N_COLUMN, y="loss")
            try:
                fit = fit_gap_law(ns, gap, groups=seeds, n_boot=ev.n_boot, level=ev.level,
                                  seed=ev.seed)  # fmt: skip
            except ValueError as e:
                out.append(missing(meta, scope, str(e)))
                continue
            interval: tuple[float | None, float | None] = fit.gamma_ci
            reason = ""
            if fit.n_groups < max(ev.min_seeds, 3):
                interval = (None, None)
                reason = f"{fit.n_groups} seed(s); the interval needs >= 3"
            numbers = {"g": fit.g, "gamma": fit.gamma, "gaps": float(fit.n)}
            out.append(_verdict(meta, scope, fit.gamma, interval, -FLAT, fit.n_groups, numbers,
                                reason))  # fmt: skip
    return out


@claim(
    "loss_law_predicts_held_out_scale",
    statement=f"a loss law L = E + A/N^alpha (+ B/D^beta) fitted at each evaluated length "
    f"ratio without the largest N (and the largest D when D takes more than 3 values) "
    f"predicts the held-out models within {HELD_OUT_TOLERANCE:.0%}: effect = largest "
    "|predicted / observed - 1| over them (a point value, judged against the tolerance), "
    "per encoding, method and ratio",
    source="Hoffmann et al. 2022 (approach 3) and Besiroglu et al. 2024 (Chinchilla scaling: "
    "a replication attempt): a fitted law is judged by the models it did not see",
    order=181,
)
def loss_law_predicts_held_out_scale(ev: Evidence, meta: Claim) -> list[Verdict]:
    """Per task, label and ratio: the held-out relative error of that ratio's law."""
    out: list[Verdict] = []
    for task, label, rows in _labelled(ev, meta, out):
        table = ratio_law_table(rows, n=N_COLUMN, y="loss", n_boot=0, seed=ev.seed)
        for fit in table.to_dicts():
            scope = f"{task}: {label} @ {fit[RATIO]:g}x"
            error = fit["heldout_max_rel_error"]
            if error is None:
                reason = fit["error"] or fit["heldout_error"] or "no held-out fit"
                out.append(missing(meta, scope, reason))
                continue
            numbers = {"heldout_points": float(fit["heldout_points"]), "alpha": fit["alpha"]}
            out.append(_verdict(meta, scope, error, (error, error), HELD_OUT_TOLERANCE,
                                fit["n_groups"], numbers, ""))  # fmt: skip
    return out

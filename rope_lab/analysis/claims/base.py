"""The machinery of claims: verdicts, the evidence a claim reads, seed bootstraps, decisions.

A claim is a function of :class:`Evidence` (the loaded eval and NTK tables of one or more run
directories) returning :class:`Verdict` rows, registered in ``registry.CLAIMS`` with
:func:`claim`. Most claims compare *arms* (sets of trials, one value per seed): the effect is a
function of the arms' means, and its interval comes from resampling each arm's seeds
(:func:`bootstrap`). :func:`decide` turns the interval and the claim's threshold into
``holds`` / ``fails`` / ``inconclusive``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

import numpy as np
import polars as pl

from rope_lab.analysis.curve_labels import (
    DATA_PATH,
    PROTOCOL,
    TASK_PARAMS,
    protocol_expr,
    trained_expr,
    variant_expr,
)
from rope_lab.registry import CLAIMS

VERDICTS: Final = ("holds", "fails", "inconclusive")
Direction = Literal[">", "<"]
Stat = Callable[[Mapping[str, float]], float]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One claim judged on one scope (a task, or ``"all"``).

    ``effect`` is the claim's statistic on the seed means, ``ci_low``/``ci_high`` its bootstrap
    interval over seeds (null with fewer than two seeds in an arm); the claim holds when the
    whole interval lies on the ``direction`` side of ``threshold``, fails when it lies wholly on
    the other side, and is inconclusive when it straddles it or the runs lack what the claim
    needs (``reason`` says which). ``numbers`` are the arm means the effect was computed from.
    """

    claim: str
    scope: str
    statement: str
    verdict: str
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    threshold: float
    direction: str
    seeds: int
    numbers: dict[str, float]
    source: str
    reason: str = ""

    def as_row(self) -> dict[str, Any]:
        """A flat dict (``numbers`` as ``"name=value; ..."`` text) for tables."""
        row = dataclasses.asdict(self)
        row["numbers"] = "; ".join(f"{k}={v:.4g}" for k, v in self.numbers.items())
        return row


@dataclasses.dataclass(frozen=True)
class Claim:
    """A registered claim: what it says, where it comes from, and how it is judged."""

    name: str
    statement: str
    source: str
    judge: Callable[[Evidence, Claim], list[Verdict]]
    order: int

    def __call__(self, ev: Evidence) -> list[Verdict]:
        """The verdicts of this claim on ``ev``."""
        return self.judge(ev, self)


def claim(name: str, *, statement: str, source: str, order: int) -> Callable[..., Any]:
    """Decorator registering ``judge(evidence, claim) -> list[Verdict]`` as the claim ``name``
    (``claim``: its own registered entry, for the verdicts' name, statement and source)."""

    Judge = Callable[[Evidence, Claim], list[Verdict]]

    def add(judge: Judge) -> Judge:
        CLAIMS.register(name)(Claim(name, statement, source, judge, order))
        return judge

    return add


@dataclasses.dataclass
class Evidence:
    """What claims read: whole-sequence eval rows, position-bucket eval rows and NTK rows, each
    joined with the flattened trial config plus ``variant`` (the encoding and what else decides
    how positions enter, e.g. ``"rope [rope | none]"``), ``task`` and ``trained`` (the row is the
    model as trained: no evaluation-time scaling).

    ``min_seeds``: seeds each arm needs before an interval is trusted; below it a verdict is
    ``inconclusive`` (with 1, a single seed is judged on its point value).
    """

    eval: pl.DataFrame
    buckets: pl.DataFrame
    ntk: pl.DataFrame
    decode: pl.DataFrame = dataclasses.field(default_factory=pl.DataFrame)  # mode "decode" rows
    attention: pl.DataFrame = dataclasses.field(default_factory=pl.DataFrame)  # mode "attention"
    min_seeds: int = 2
    n_boot: int = 2000
    seed: int = 0
    level: float = 0.95

    @classmethod
    def from_frames(
        cls,
        eval_rows: pl.DataFrame,
        ntk_rows: pl.DataFrame | None = None,
        decode_rows: pl.DataFrame | None = None,
        attention_rows: pl.DataFrame | None = None,
        **options: Any,
    ) -> Evidence:
        """Evidence from the tables of :func:`rope_lab.analysis.query.eval_table` (teacher-forced,
        with
        buckets; its decode and attention-statistics rows) and
        :func:`rope_lab.analysis.query.ntk_table`; only finished trials (status ``done``) count."""
        if "depth" in eval_rows.columns:  # rows at a set needle depth (eval.depths) repeat lengths
            eval_rows = eval_rows.filter(pl.col("depth").is_null())
        split = several_corpora(eval_rows)
        frame = _annotate(eval_rows, trained=trained_expr(eval_rows.columns), split=split)
        whole = frame.filter(pl.col("position_bucket").is_null())
        buckets = frame.filter(pl.col("position_bucket").is_not_null())
        ntk = pl.DataFrame()
        if ntk_rows is not None and not ntk_rows.is_empty():
            as_trained = pl.col("method").fill_null("none") == "none"
            ntk = _annotate(ntk_rows, trained=as_trained, split=split)
        decode = pl.DataFrame()
        if decode_rows is not None and not decode_rows.is_empty():
            decode = _annotate(decode_rows, trained=trained_expr(decode_rows.columns), split=split)
        attention = pl.DataFrame()
        if attention_rows is not None and not attention_rows.is_empty():
            trained = trained_expr(attention_rows.columns)
            attention = _annotate(attention_rows, trained=trained, split=split)
        return cls(whole, buckets, ntk, decode, attention, **options)

    def tasks(self) -> list[str]:
        """Task names present in the eval rows, sorted."""
        if self.eval.is_empty():
            return []
        return sorted(self.eval.get_column("task").unique().drop_nulls().to_list())

    def variants(self, task: str | None = None) -> set[str]:
        """The variants (see the class doc) with rows as trained, for ``task`` or all."""
        rows = self.eval.filter(pl.col("trained"))
        if task is not None:
            rows = rows.filter(pl.col("task") == task)
        return set(rows.get_column("variant").unique().to_list()) if not rows.is_empty() else set()

    def is_text(self, task: str) -> bool:
        """Whether ``task`` (a scope of :meth:`tasks`) is read by its loss (language modelling:
        every position scored). Claims judge a language model's loss in nats per token: a
        scope holds one task on one corpus (:func:`_annotate`), so one tokenizer, and their
        thresholds are in nats; figures and tables read bits per byte beside it."""
        from rope_lab.analysis.query import LM_METRICS, default_metric

        if "task.name" not in self.eval.columns:
            return default_metric(task) in LM_METRICS
        names = self.eval.filter(pl.col("task") == task).get_column("task.name")
        return default_metric(names[0] if len(names) else task) in LM_METRICS


def several_corpora(frame: pl.DataFrame) -> frozenset[str]:
    """The task names whose rows in ``frame`` read more than one corpus (the ``path`` of their
    ``task.params``: a byte-level and a BPE corpus, or two texts); their scopes name it."""
    if "task.name" not in frame.columns or TASK_PARAMS not in frame.columns:
        return frozenset()
    counts = frame.group_by("task.name").agg(DATA_PATH.drop_nulls().n_unique().alias("n"))
    return frozenset(counts.filter(pl.col("n") > 1).get_column("task.name").to_list())


def _annotate(
    frame: pl.DataFrame, *, trained: pl.Expr, split: frozenset[str] = frozenset()
) -> pl.DataFrame:
    if "status" in frame.columns:
        frame = frame.filter(pl.col("status") == "done")
    # the variant is how the model was built; how a text was read (its protocol) and which
    # corpus (for a task run on several: `split`) are part of the scope, so claims compare
    # encodings read alike and never pool two protocols, or models of two tokenizers
    extra = [variant_expr(frame.columns, protocol=False).alias("variant"), trained.alias("trained")]
    if "task.name" in frame.columns:
        read = protocol_expr(frame.columns) if PROTOCOL in frame.columns else pl.lit("")
        corpus = pl.lit("")
        if split and TASK_PARAMS in frame.columns:
            named = pl.concat_str([pl.lit(" "), DATA_PATH.fill_null("?")])
            corpus = pl.when(pl.col("task.name").is_in(sorted(split))).then(named)
            corpus = corpus.otherwise(pl.lit(""))
        extra.append(pl.concat_str([pl.col("task.name"), corpus, read]).alias("task"))
    else:
        extra.append(pl.lit("?").alias("task"))
    if "train.seed" not in frame.columns:
        extra.append(pl.lit(0).alias("train.seed"))
    return frame.with_columns(extra)


def bootstrap(
    arms: Mapping[str, Sequence[float]],
    stat: Stat,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float | None, float | None]:
    """``stat`` of the arms' means, and its percentile interval at ``level`` over ``n_boot``
    resamples of each arm's values (seeds) with replacement, each arm on its own.

    ``arms``: name -> values (n_arm,). The interval is (None, None) when an arm has one value.
    """
    values = {k: np.asarray(v, dtype=float) for k, v in arms.items()}
    point = float(stat({k: float(v.mean()) for k, v in values.items()}))
    if min(v.size for v in values.values()) < 2:
        return point, None, None
    rng = np.random.default_rng(seed)
    draws = {
        k: v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1) for k, v in values.items()
    }
    stats = np.array([stat({k: float(d[i]) for k, d in draws.items()}) for i in range(n_boot)])
    lo, hi = np.percentile(stats, [50 * (1 - level), 50 * (1 + level)])
    return point, float(lo), float(hi)


def decide(low: float | None, high: float | None, threshold: float, direction: Direction) -> str:
    """``holds`` when [low, high] lies wholly beyond ``threshold`` in ``direction`` (``>``:
    above it), ``fails`` when it lies wholly on the other side (or on it), else
    ``inconclusive``; ``inconclusive`` without an interval."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "inconclusive"
    if direction == ">":
        return "holds" if low > threshold else "fails" if high <= threshold else "inconclusive"
    return "holds" if high < threshold else "fails" if low >= threshold else "inconclusive"


def judge_arms(
    ev: Evidence,
    meta: Claim,
    scope: str,
    arms: Mapping[str, Sequence[float]],
    stat: Stat,
    *,
    threshold: float,
    direction: Direction,
    statement: str | None = None,
) -> Verdict:
    """The verdict of ``stat`` over ``arms`` (name -> per-seed values) against ``threshold``.

    With fewer than ``ev.min_seeds`` values in an arm the verdict is ``inconclusive``; with
    ``min_seeds`` 1 and single-seed arms the point value stands in for the interval."""
    seeds = min((len(v) for v in arms.values()), default=0)
    numbers = {k: float(np.mean(v)) for k, v in arms.items()}
    effect, lo, hi = bootstrap(arms, stat, n_boot=ev.n_boot, seed=ev.seed, level=ev.level)
    reason = ""
    if seeds < ev.min_seeds:
        verdict = "inconclusive"
        reason = f"{seeds} seed(s) in the smallest arm; the interval needs >= {ev.min_seeds}"
    else:
        if lo is None:  # min_seeds 1 and one seed: judge the point value
            lo = hi = effect
        verdict = decide(lo, hi, threshold, direction)
        if verdict == "inconclusive":
            reason = f"the interval [{lo:.4g}, {hi:.4g}] straddles {threshold:g}"
    return Verdict(
        claim=meta.name,
        scope=scope,
        statement=statement or meta.statement,
        verdict=verdict,
        effect=effect,
        ci_low=lo if seeds >= 2 else None,
        ci_high=hi if seeds >= 2 else None,
        threshold=threshold,
        direction=direction,
        seeds=seeds,
        numbers=numbers,
        source=meta.source,
        reason=reason,
    )


def judge_gap(
    ev: Evidence,
    meta: Claim,
    scope: str,
    arms: Mapping[str, Sequence[float]],
    larger: str,
    smaller: str,
) -> Verdict:
    """:func:`judge_arms` of the claim mean(``larger`` arm) - mean(``smaller`` arm) > 0."""
    return judge_arms(ev, meta, scope, arms, gap(larger, smaller), threshold=0.0, direction=">")


def gap(larger: str, smaller: str) -> Stat:
    """The statistic mean(``larger`` arm) - mean(``smaller`` arm)."""
    return lambda m: m[larger] - m[smaller]


def missing(meta: Claim, scope: str, reason: str, statement: str | None = None) -> Verdict:
    """An ``inconclusive`` verdict for runs that lack what the claim needs."""
    return Verdict(
        claim=meta.name,
        scope=scope,
        statement=statement or meta.statement,
        verdict="inconclusive",
        effect=None,
        ci_low=None,
        ci_high=None,
        threshold=math.nan,
        direction="",
        seeds=0,
        numbers={},
        source=meta.source,
        reason=reason,
    )


def per_seed(frame: pl.DataFrame, value: str = "value") -> list[float]:
    """The mean of ``value`` per ``train.seed`` (several trials of one seed averaged), in seed
    order, NaN dropped."""
    if frame.is_empty():
        return []
    by_seed = (
        frame.group_by("train.seed")
        .agg(pl.col(value).cast(pl.Float64).fill_nan(None).mean())
        .drop_nulls(value)
        .sort("train.seed")
    )
    return by_seed.get_column(value).to_list()


def iter_claims() -> Iterator[Claim]:
    """The registered claims in their order."""
    for _, entry in CLAIMS.items():
        yield entry


def aligned_lines(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain-text table: the header, a rule and one line per row, columns left-aligned to
    their widest cell and separated by two spaces."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    fmt_row = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt_row.format(*head), "  ".join("-" * w for w in widths)] + [
        fmt_row.format(*r) for r in rows
    ]

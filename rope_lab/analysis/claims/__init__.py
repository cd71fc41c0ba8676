"""Published claims about length extrapolation, judged on a lab's own runs.

Each claim is a registered function of the loaded results (``registry.CLAIMS``; one module per
family: :mod:`.encodings`, :mod:`.scaling`, :mod:`.kernels`, :mod:`.regime`, :mod:`.laws`,
:mod:`.optima`, :mod:`.attention`)
returning one :class:`Verdict` per scope (task, ratio, variant): ``holds``, ``fails`` or
``inconclusive`` (the runs lack what it needs, or the interval straddles the threshold), with
the effect size, its bootstrap interval over seeds, the numbers used, the threshold and the
source.
``rope-lab claims RUN_DIR...`` prints them; :func:`judge` returns them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from rope_lab.analysis.claims.base import (
    VERDICTS,
    Claim,
    Evidence,
    Verdict,
    aligned_lines,
    bootstrap,
    decide,
    iter_claims,
)
from rope_lab.registry import CLAIMS

__all__ = [
    "VERDICTS",
    "Claim",
    "Evidence",
    "Verdict",
    "bootstrap",
    "decide",
    "evidence",
    "evidence_frames",
    "format_verdicts",
    "judge",
    "left_out_line",
    "readable",
    "verdict_frame",
]

# Every module registers its claims on import (order places them in the table).
from rope_lab.analysis.claims import (  # noqa: F401
    attention,
    encodings,
    kernels,
    laws,
    lengths,
    optima,
    regime,
    scaling,
    windows,
)


def evidence(source: Any, **options: Any) -> Evidence:
    """The :class:`Evidence` of run directories (or loaded Results): eval rows with their
    position buckets, decode rows, attention-statistics rows and NTK rows, each with its trial
    config."""
    return Evidence.from_frames(*evidence_frames(source), **options)


def evidence_frames(source: Any) -> tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame,
                                          pl.DataFrame]:  # fmt: skip
    """The eval (with buckets), NTK (None without rows), decode and attention rows of run
    directories (or loaded Results), each with its trial config, as
    :meth:`Evidence.from_frames` takes them."""
    from rope_lab.analysis import query

    res = query.results_of(source)
    eval_rows = query.eval_table(res, whole_sequence=False)
    has_rows = "metric" in res.ntk.collect_schema().names()
    # every kernel: NTK claims read the `ntk` rows (`kernels.ntk_metric`), NNGP ones both
    ntk_rows = query.ntk_table(res, kernel=None) if has_rows else None
    decode_rows = query.eval_table(res, mode="decode")
    attention_rows = query.eval_table(res, mode="attention")
    return eval_rows, ntk_rows, decode_rows, attention_rows


def judge(source: Any, names: Sequence[str] | None = None, **options: Any) -> list[Verdict]:
    """The verdicts of the claims ``names`` (default: all registered, in order) on ``source``
    (run directories, or loaded Results). ``options``: min_seeds (2), n_boot, seed, level."""
    ev = source if isinstance(source, Evidence) else evidence(source, **options)
    chosen = [CLAIMS[n] for n in names] if names else list(iter_claims())
    out: list[Verdict] = []
    for entry in chosen:
        out.extend(entry(ev))
    return out


def verdict_frame(verdicts: Sequence[Verdict]) -> pl.DataFrame:
    """One row per verdict (``numbers`` as text)."""
    rows = [v.as_row() for v in verdicts]
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _ci(v: Verdict) -> str:
    return "–" if v.ci_low is None or v.ci_high is None else f"[{v.ci_low:.3g}, {v.ci_high:.3g}]"


def readable(verdicts: Sequence[Verdict]) -> tuple[list[Verdict], list[Verdict]]:
    """(verdicts with an effect or a decision, those inconclusive for want of anything to read
    in the runs: a claim about a task, encoding or method they do not hold)."""
    shown = [v for v in verdicts if v.effect is not None or v.verdict != "inconclusive"]
    unread = [v for v in verdicts if v.effect is None and v.verdict == "inconclusive"]
    return shown, unread


def left_out_line(unread: Sequence[Verdict]) -> str:
    """The footer naming the rows `readable` left out, by claim ("" when none)."""
    if not unread:
        return ""
    names = sorted({v.claim for v in unread})
    return (
        f"left out: {len(unread)} inconclusive rows with nothing to read in these runs, of "
        f"{len(names)} claims ({', '.join(names)}); --claim NAME shows a claim's every row"
    )


def format_verdicts(verdicts: Sequence[Verdict], fmt: str = "table", footer: str = "") -> str:
    """The verdicts as an aligned text table, a markdown table (``md``) or JSON (``json``);
    `footer` (a line, e.g. `left_out_line`) ends the table and markdown forms."""
    if fmt == "json":
        return json.dumps([v.__dict__ for v in verdicts], indent=2, default=str)
    head = ["claim", "scope", "verdict", "effect", "95% CI", "threshold", "seeds", "note"]
    rows = [
        [
            v.claim,
            v.scope,
            v.verdict,
            _num(v.effect),
            _ci(v),
            f"{v.direction} {v.threshold:g}" if v.direction else "–",
            str(v.seeds),
            v.reason or "",
        ]
        for v in verdicts
    ]
    if fmt == "md":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        sources = {v.claim: (v.statement, v.source) for v in verdicts}
        lines += ["", "Claims:", ""]
        lines += [f"- **{k}**: {s} ({src})" for k, (s, src) in sources.items()]
        return "\n".join(lines + (["", footer] if footer else []))
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; allowed: table, md, json")
    lines = aligned_lines(head, rows)
    counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items()))
    return "\n".join(lines + ([footer] if footer else []))

"""Whether a claim's verdict holds across corpora and training setups.

A **cell** is one (corpus, setup) of the trials: the corpus is a text task's
``task.params.path`` (a file, ``builtin:NAME`` or a prepared corpus' folder; ``–`` for a
task without one), the setup the values of the **setup fields**. Those are, unless named, the
``model.*`` and ``train.*`` config fields that vary between trials and are a grid axis: other
than the seed, the position encoding's own fields (``model.position.*``) and the fields that
label a variant (:func:`rope_lab.analysis.curve_labels.labelled_fields`), list-valued fields,
and fields whose every value is seen with every encoding of its task (so ALiBi alone at widths
32 and 128, the arms of a width claim, is not a setup). Every claim is judged on each cell
alone (:func:`rope_lab.analysis.claims.judge`), so a scope never mixes two cells.

A row's **stable** is true only when every cell it belongs in (the cells with a corpus for a
claim judged on text, the others for one judged on synthetic tasks) has the same verdict and
it is ``holds`` or ``fails``: a cell ``inconclusive`` or ``missing`` (no verdict of that scope
there) makes it false. Rows inconclusive without an effect in every cell (the runs hold
nothing the claim reads) are left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import polars as pl

from rope_lab.analysis.claims.base import (
    DATA_PATH,
    TASK_PARAMS,
    Evidence,
    Verdict,
    aligned_lines,
)
from rope_lab.analysis.curve_labels import labelled_fields, variant_expr

NO_CORPUS: Final = "–"
SETUP_PREFIXES: Final = ("model.", "train.")
CORPUS_COLUMN: Final = "_corpus"
SETUP_COLUMN: Final = "_setup"


class StabilityError(ValueError):
    """A setup field that is not a config column of the runs."""


def _encoding_free(columns: Sequence[str]) -> list[str]:
    labelled = {item.column for item in labelled_fields()}
    return [
        c
        for c in columns
        if c.startswith(SETUP_PREFIXES)
        and not c.startswith("model.position.")
        and c != "train.seed"
        and c not in labelled
    ]


def setup_fields(frame: pl.DataFrame) -> list[str]:
    """The setup fields of eval rows ``frame`` (the module doc's rule), in column order."""
    if frame.is_empty() or "trial_id" not in frame.columns:
        return []
    candidates = [
        c for c in _encoding_free(frame.columns) if not isinstance(frame.schema[c], pl.List)
    ]
    task = pl.col("task.name") if "task.name" in frame.columns else pl.lit("?")
    trials = frame.select(
        "trial_id",
        *candidates,
        task.alias("_task"),
        variant_expr(frame.columns, protocol=False).alias("_variant"),
    ).unique("trial_id")
    fields = []
    for field in candidates:
        per_task = trials.group_by("_task").agg(
            pl.col(field).cast(pl.String).n_unique().alias("values"),
            pl.col("_variant").n_unique().alias("variants"),
        )
        if per_task.get_column("values").max() in (None, 0, 1):
            continue
        seen = trials.group_by("_task", pl.col(field).cast(pl.String)).agg(
            pl.col("_variant").n_unique().alias("with")
        )
        crossed = seen.join(per_task, on="_task").filter(pl.col("values") > 1)
        if (crossed.get_column("with") == crossed.get_column("variants")).all():
            fields.append(field)
    return fields


def _short(fields: Sequence[str]) -> dict[str, str]:
    tails = [f.rsplit(".", 1)[-1] for f in fields]
    return {f: t if tails.count(t) == 1 else f for f, t in zip(fields, tails, strict=True)}


def with_cells(frame: pl.DataFrame, fields: Sequence[str]) -> pl.DataFrame:
    """``frame`` with its cell: ``_corpus`` (the path, ``builtin:`` dropped; ``–`` without one)
    and ``_setup`` (``"steps=200 width=32"``: the setup ``fields``' values; ``–`` for none)."""
    if frame.is_empty():
        return frame
    corpus = pl.lit(None, pl.String)
    if TASK_PARAMS in frame.columns:
        corpus = DATA_PATH.str.replace(r"^builtin:", "")
    names = _short(fields)
    parts = [
        pl.concat_str([pl.lit(f"{names[f]}="), pl.col(f).cast(pl.String).fill_null("null")])
        for f in fields
        if f in frame.columns
    ]
    setup = pl.concat_str(parts, separator=" ") if parts else pl.lit(NO_CORPUS)
    return frame.with_columns(
        corpus.fill_null(NO_CORPUS).alias(CORPUS_COLUMN), setup.alias(SETUP_COLUMN)
    )


def _cell_name(corpus: str, setup: str) -> str:
    return corpus if setup == NO_CORPUS else f"{corpus} {setup}"


def _cell_text(v: Verdict | None) -> str:
    """``"holds +0.127 [+0.098, +0.155]"``: verdict, effect and its interval where judged."""
    if v is None:
        return "missing"
    if v.effect is None:
        return v.verdict
    if v.ci_low is None or v.ci_high is None:
        return f"{v.verdict} {v.effect:+.3g}"
    return f"{v.verdict} {v.effect:+.3g} [{v.ci_low:+.3g}, {v.ci_high:+.3g}]"


def stability_frame(
    frames: Sequence[pl.DataFrame | None],
    names: Sequence[str] | None = None,
    *,
    fields: Sequence[str] | None = None,
    **options: Any,
) -> pl.DataFrame:
    """One row per (claim, scope): a column per cell (``"python-docs steps=200"``) holding its
    verdict, effect and bootstrap interval (``"holds +0.12 [+0.08, +0.16]"``, ``"missing"``;
    null where the row does not belong),
    and ``stable`` (the module doc's rule). ``frames``: eval, NTK, decode and attention rows as
    :meth:`Evidence.from_frames` takes them; ``fields``: the setup fields (default derived)."""
    from rope_lab.analysis.claims import judge

    eval_rows = frames[0] if frames[0] is not None else pl.DataFrame()
    chosen = setup_fields(eval_rows) if fields is None else list(fields)
    for field in chosen:
        if field not in eval_rows.columns:
            raise StabilityError(f"--setup {field}: not a config column of these runs")
    marked = [None if f is None else with_cells(f, chosen) for f in frames]
    first = with_cells(eval_rows, chosen)
    if first.is_empty():
        return pl.DataFrame()
    keys = first.select(CORPUS_COLUMN, SETUP_COLUMN, *chosen).unique([CORPUS_COLUMN, SETUP_COLUMN])
    cells = keys.sort([CORPUS_COLUMN, *chosen]).select(CORPUS_COLUMN, SETUP_COLUMN).rows()
    found: dict[tuple[str, str], dict[tuple[str, str], Verdict]] = {}
    for corpus, setup in cells:
        own = pl.col(CORPUS_COLUMN).eq(corpus) & pl.col(SETUP_COLUMN).eq(setup)
        part = [None if f is None or f.is_empty() else f.filter(own) for f in marked[1:]]
        ev = Evidence.from_frames(first.filter(own), *part, **options)
        for v in judge(ev, names):
            found.setdefault((v.claim, v.scope), {})[corpus, setup] = v
    rows = []
    for (name, scope), verdicts in found.items():
        if not names and all(v.effect is None for v in verdicts.values()):
            continue
        on_text = {corpus != NO_CORPUS for corpus, _ in verdicts}
        row: dict[str, Any] = {"claim": name, "scope": scope}
        belong = []
        for cell in cells:
            here = (cell[0] != NO_CORPUS) in on_text
            row[_cell_name(*cell)] = _cell_text(verdicts.get(cell)) if here else None
            if here:
                belong.append(verdicts[cell].verdict if cell in verdicts else "missing")
        row["stable"] = len(set(belong)) == 1 and belong[0] in ("holds", "fails")
        rows.append(row)
    schema: dict[str, Any] = {"claim": pl.String, "scope": pl.String}
    schema |= {_cell_name(c, s): pl.String for c, s in cells} | {"stable": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)


def format_stability(frame: pl.DataFrame, fmt: str = "table") -> str:
    """The stability table as aligned text, markdown (``md``) or JSON (``json``)."""
    if fmt == "json":
        return json.dumps(frame.to_dicts(), indent=2)
    head = frame.columns
    rows = [["" if x is None else str(x).lower() if isinstance(x, bool) else x for x in r]
            for r in frame.rows()]  # fmt: skip
    if fmt == "md":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; allowed: table, md, json")
    lines = [line.rstrip() if i > 1 else line for i, line in enumerate(aligned_lines(head, rows))]
    stable = sum(r[-1] == "true" for r in rows)
    lines.append(f"{stable} of {len(rows)} stable")
    return "\n".join(lines)

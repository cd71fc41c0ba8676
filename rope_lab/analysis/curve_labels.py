"""Curve labels of result rows, as polars expressions: the PE kind for an encoding as trained,
``"rope (linear x2)"`` for RoPE trained with a scaling, ``"rope/yarn x4"`` for a scaling applied
at evaluation, ``"alibi/log-length temperature"`` for the zero-shot attention temperature (method
``"temperature"``, any encoding), plus ``" +ft100"`` after 100 fine-tuning steps.

Rows carry the flattened trial config, an encoding's fields in ``model.position.<kind>.<field>``
(null for the other kinds). The rotary family's training-time scaling is its ``scaling`` and
``factor`` fields (``positions.rotary.RotaryConfig``), read here for whichever kind a row has,
so no kind name is tested. Nothing here imports JAX or the encoding registry.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Sequence
from typing import Any, Final

import polars as pl

from rope_lab.config import TrialConfig
from rope_lab.results.columns import FAMILY_LABEL_COLUMN, NAMED_ELSEWHERE, OPTIONS_COLUMN
from rope_lab.roles import NOTHING, Label, roles
from rope_lab.trial.scaling_plan import TEMPERATURE
from rope_lab.typed import nested_dataclass

KIND: Final = "model.position.kind"
# the rotary family's training-time scaling fields (`RotaryConfig.scaling`, `.factor`)
SCALING_FIELD: Final = "scaling"
FACTOR_FIELD: Final = "factor"
TEMPERATURE_LABEL: Final = "log-length temperature"  # what a temperature row's label names
LAYERS: Final = "model.layers"
PROTOCOL: Final = "eval.text_protocol"
STRIDE: Final = "eval.text_stride"
TASK_PARAMS: Final = "task.params"  # a task's parameters, as JSON pairs: [["path", "..."]]
# a text task's corpus (file, builtin: or folder), from its parameters
DATA_PATH: Final = pl.col(TASK_PARAMS).str.extract(r'\[\s*"path"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\]', 1)
CORPUS: Final = "corpus"  # the column `corpus_expr` names
# The curve-label rules a field's role may name instead of a `Label` (`rope_lab.roles`).
RULES: Final = ("encoding", "family", "layout", "protocol")


@dataclasses.dataclass(frozen=True)
class Labelled:
    """A config field that names curves: its result column, its label and the value at
    which it names nothing (its neutral value, else its default)."""

    column: str
    label: Label | str
    off: Any


def labelled_fields(cls: type = TrialConfig, prefix: str = "") -> list[Labelled]:
    """Every field of a trial's config whose role declares a label, in declaration order
    (sections nested; variant fields and tuples of sections are leaves)."""
    out: list[Labelled] = []
    hints = typing.get_type_hints(cls)
    for f, role in roles(cls):
        column = f"{prefix}{f.name}"
        nested = nested_dataclass(hints[f.name])
        if nested is not None and "registry" not in f.metadata:
            out.extend(labelled_fields(nested, f"{column}."))
        elif isinstance(role.label, Label | str):
            off = role.neutral if role.neutral is not NOTHING else _default(f)
            out.append(Labelled(column, role.label, off))
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _regime_suffix() -> str:
    """What a lazy twin's variant ends with: `train.regime`'s declared label."""
    (found,) = (x for x in labelled_fields() if x.column == "train.regime")
    assert isinstance(found.label, Label)
    return found.label.text


LAZY_SUFFIX: Final = _regime_suffix()


def _suffix(item: Labelled) -> pl.Expr:
    """A `Label`'s text where the row's value is on (not null, not `off`, and `when` if set),
    the value standing for `{}`; '' elsewhere."""
    assert isinstance(item.label, Label)
    col = pl.col(item.column)
    if item.label.when is not NOTHING:
        on = col == item.label.when
    elif item.off is None:
        on = col.is_not_null()
    else:
        on = col.is_not_null() & (col != item.off)
    before, marker, after = item.label.text.partition("{}")
    text = pl.lit(before)
    if marker:
        shown = col.cast(pl.String).str.replace(r"\.0$", "")
        text = pl.concat_str([pl.lit(before), shown, pl.lit(after)])
    return pl.when(on.fill_null(False)).then(text).otherwise(pl.lit(""))


def _encoding_columns(columns: Sequence[str], field: str | None = None) -> list[str]:
    """Flattened encoding fields ``model.position.<kind>.<field>`` (any field when None)."""
    out = []
    for col in columns:
        parts = col.split(".")
        if len(parts) == 4 and parts[:2] == ["model", "position"] and field in (None, parts[3]):
            out.append(col)
    return out


def own_field(columns: Sequence[str], field: str) -> pl.Expr | None:
    """Each row's value of its own encoding's ``field`` (``model.position.<kind>.<field>`` of
    the row's kind; null where the kind has no such field), or None when no kind has it."""
    cols = _encoding_columns(columns, field)
    if not cols:
        return None
    if KIND not in columns:
        return pl.coalesce([pl.col(c) for c in cols])
    return pl.coalesce([pl.when(pl.col(KIND) == c.split(".")[2]).then(pl.col(c)) for c in cols])


def layout_name(kind: str | None, layers_json: str | None) -> str:
    """' [rope.w16 | none]' for a layer layout (each kind: its encoding, its window as 'w16',
    Llama 4 query scaling as 't0.1', 'fixed' without eval scaling), '' without one."""
    layers = json.loads(layers_json) if layers_json else []
    if not layers:
        return ""
    names = []
    for layer in layers:
        own = layer.get("position") or {}
        parts = [own.get("kind") or kind or "?"]
        theta = (own.get(own.get("kind")) or {}).get("theta")  # a rotary kind's own base
        if theta is not None and theta != 10000.0:
            parts[0] += f"{theta:g}"
        if layer.get("window") is not None:
            parts.append(f"w{layer['window']}")
        if layer.get("attn_scale"):
            parts.append(f"t{layer['attn_scale']:g}")
        if layer.get("eval_scaling") is False:
            parts.append("fixed")
        names.append(".".join(parts))
    return f" [{' | '.join(names)}]"


def _options_expr(columns: Sequence[str]) -> pl.Expr:
    """``" rotary_fraction 0.25"``: the row's encoding fields off their defaults, as written
    with the trial (`results.columns.options_text`). Rows of frames without that column
    (written before it existed) are described through the encoding registry, which imports
    the encodings."""
    if OPTIONS_COLUMN in columns:
        return pl.col(OPTIONS_COLUMN).fill_null("")
    parts = [
        p for p in (_legacy_option_expr(c) for c in _encoding_columns(columns)) if p is not None
    ]
    return pl.concat_str(parts) if parts else pl.lit("")


def _legacy_option_expr(col: str) -> pl.Expr | None:
    """``" name value"`` where the row's encoding owns field ``col`` and it is off its
    registered default (native expressions: a Python function inside when/then branches was
    not applied to every row)."""
    import dataclasses

    from rope_lab.registry import POSITIONS

    _, _, owner, name = col.split(".")
    if owner not in POSITIONS or name in NAMED_ELSEWHERE:
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(POSITIONS[owner])}
    if name not in defaults:
        return None
    value = pl.col(col)
    off = (pl.col(KIND) == owner) & value.is_not_null()
    if defaults[name] is not None:
        off = off & (value != defaults[name])
    shown = value.cast(pl.String).str.replace(r"\.0$", "")
    return pl.when(off).then(pl.concat_str([pl.lit(f" {name} "), shown])).otherwise(pl.lit(""))


def variant_expr(columns: Sequence[str], *, protocol: bool = True) -> pl.Expr:
    """The PE kind and what else decides the model: its fields that differ from their
    defaults (``"rope rotary_fraction 0.25"``), then each field whose role declares a label
    (`rope_lab.roles`, in declaration order: randomised positions ``" +randomized"``, a layer
    layout ``"rope [rope.w16 | none]"``, Scalable-Softmax ``" +SSMax"``, grouped-query
    attention ``" kv2"``, ..., PoSE ``" +PoSE 256"``, the linearised twin ``" +lazy"``) off its
    neutral value, and (with ``protocol``) a text protocol other than random windows.
    Trials that differ only there get distinct labels, so their curves are never pooled. A
    model family with its own label (``family.label``: ``"CNN k3 d1,2,4"``) is named by it in
    place of the encoding it does not have."""
    out = pl.concat_str([pl.col(KIND).fill_null("?"), _options_expr(columns)])
    if FAMILY_LABEL_COLUMN in columns:
        own = pl.col(FAMILY_LABEL_COLUMN).fill_null("")
        out = pl.when(own != "").then(own).otherwise(out)
    parts = [out]
    for item in labelled_fields():
        if item.column not in columns:
            continue
        if isinstance(item.label, Label):
            parts.append(_suffix(item))
        elif item.label == "layout":
            layout = pl.struct([KIND, LAYERS]).map_elements(
                lambda r: layout_name(r[KIND], r[LAYERS]), return_dtype=pl.String
            )
            parts.append(layout.fill_null(""))
        elif item.label == "protocol" and item.column == PROTOCOL and protocol:
            parts.append(protocol_expr(columns))
    return pl.concat_str(parts)


def corpus_expr(columns: Sequence[str]) -> pl.Expr:
    """The column `corpus`: a text task's corpus (the `path` of `task.params`), null for a task
    that reads none. Two corpora are two tasks for every fit: their losses are not one curve
    even in bits per byte (a byte-level and a BPE model of one text differ in level and in
    what a training token is)."""
    value = DATA_PATH if TASK_PARAMS in columns else pl.lit(None, dtype=pl.String)
    return value.alias(CORPUS)


def protocol_expr(columns: Sequence[str]) -> pl.Expr:
    """' (non-overlapping windows)' / ' (sliding windows, stride 32)' for text evaluated by
    Press et al.'s protocols, '' for random windows."""
    protocol = pl.col(PROTOCOL).fill_null("random")
    stride = pl.col(STRIDE) if STRIDE in columns else pl.lit(None)
    if "train.length" in columns:
        stride = stride.fill_null(pl.col("train.length"))
    sliding = pl.concat_str(
        [pl.lit(" (sliding windows, stride "), stride.cast(pl.String), pl.lit(")")]
    )
    return (
        pl.when(protocol == "nonoverlapping")
        .then(pl.lit(" (non-overlapping windows)"))
        .when(protocol == "sliding")
        .then(sliding.fill_null(" (sliding windows)"))
        .otherwise(pl.lit(""))
    )


def _factor_str(col: str | pl.Expr) -> pl.Expr:
    """``2.0`` -> ``"2"``, ``1.5`` -> ``"1.5"`` (like ``f"{x:g}"`` for typical factors)."""
    f = pl.col(col) if isinstance(col, str) else col
    return (
        pl.when(f.is_null())
        .then(pl.lit("?"))
        .when(f == f.round(0))
        .then(f.cast(pl.Int64, strict=False).cast(pl.String))
        .otherwise(f.round(4).cast(pl.String))
    )


def trained_expr(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Whether a row is its PE as trained rather than a RoPE scaling applied at evaluation.

    ``method == as_trained`` (the NTK table's ``"none"``), or, when ``as_trained`` is None,
    method ``"none"`` or method and factor equal to the trained RoPE scaling (eval table).
    """
    method = pl.col("method").fill_null("none")
    if as_trained is not None:
        return method == as_trained
    scaling = own_field(columns, SCALING_FIELD)
    if scaling is None:
        return method == "none"
    same_factor = pl.lit(True)
    train_factor = own_field(columns, FACTOR_FIELD)
    if train_factor is not None:
        same_factor = pl.col("factor").is_null() | (pl.col("factor") == train_factor)
    return (method == "none") | ((method == scaling.fill_null("default")) & same_factor)


def trained_with_scaling(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Whether a row's RoPE was trained with a scaling, which its label as trained names
    (``"rope (linear x2)"``; eval tables, ``as_trained`` None, only)."""
    scaling = own_field(columns, SCALING_FIELD)
    if as_trained is not None or KIND not in columns or scaling is None:
        return pl.lit(False)
    return scaling.fill_null("default") != "default"  # null: not a rotary encoding


def label_expr(columns: Sequence[str], *, as_trained: str | None = None) -> pl.Expr:
    """Curve label: ``"alibi"``, ``"rope"``, ``"rope/yarn x4"``, ``"rope/ntk x2 +ft100"``,
    ``"alibi/log-length temperature"``.

    Rows of the PE as trained (:func:`trained_expr`) read the PE kind; RoPE trained with a
    scaling reads ``"rope (linear x2)"``; temperature rows name no factor (their multiplier
    follows from the evaluated length).
    """
    method = pl.col("method").fill_null("none")
    trained = trained_expr(columns, as_trained=as_trained)
    scaled = (
        pl.when(method == TEMPERATURE)
        .then(pl.lit(TEMPERATURE_LABEL))
        .otherwise(pl.concat_str([method, pl.lit(" x"), _factor_str("factor")]))
    )
    if KIND in columns:
        kind = variant_expr(columns)
        base = kind
        scaling = own_field(columns, SCALING_FIELD)
        if scaling is not None and as_trained is None:
            name = [scaling.fill_null("default")]
            train_factor = own_field(columns, FACTOR_FIELD)
            if train_factor is not None:
                name += [pl.lit(" x"), _factor_str(train_factor)]
            with_name = pl.concat_str([kind, pl.lit(" ("), *name, pl.lit(")")])
            base = pl.when(trained_with_scaling(columns)).then(with_name).otherwise(kind)
        label = pl.when(trained).then(base).otherwise(pl.concat_str([kind, pl.lit("/"), scaled]))
    else:
        label = pl.when(trained).then(method).otherwise(scaled)
    if "finetune_steps" in columns:
        ft = pl.col("finetune_steps")
        label = (
            pl.when(ft.fill_null(0) > 0)
            .then(pl.concat_str([label, pl.lit(" +ft"), ft.cast(pl.String)]))
            .otherwise(label)
        )
    return label.alias("label")

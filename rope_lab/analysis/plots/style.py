"""Look of the figures: curve order and colours (one hue per PE kind / RoPE scaling method,
light to dark shades for its factors, all looked up by :func:`family_style`; the log-length
temperature of a PE kind in that kind's hue, dotted), line dashes, seaborn style and the figure
legend."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import polars as pl
import seaborn as sns
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rope_lab.analysis import query as q
from rope_lab.analysis.curve_labels import TEMPERATURE_LABEL
from rope_lab.analysis.plots.curves import Curve, curves
from rope_lab.analysis.plots.labels import format_value
from rope_lab.registry import POSITIONS, SCALINGS
from rope_lab.trial.scaling_plan import TEMPERATURE

DASHES: Final[tuple[Any, ...]] = ("", (4, 1.5), (1, 1.2), (5, 1.5, 1, 1.5), (2, 2), (6, 2, 2, 2))
SCALED_DASH: Final = (4, 1.6)  # a RoPE scaling applied at evaluation
TEMPERATURE_DASH: Final = (1, 1.5)  # the log-length temperature
LEGEND_ROWS: Final = 26  # entries per legend column
LEGEND_ROW_INCHES: Final = 0.23
LEGEND_COLUMN_INCHES: Final = 6.5
# how far a scaling's colours move towards a rotary kind's own colour (kinds after the first)
ROTARY_MIX: Final = 0.4


class FamilyStyle(NamedTuple):
    """Where a curve family stands in legends and the light / dark end of its hue (None: a
    spare colour is picked)."""

    rank: int
    shades: tuple[str, str] | None


def family_style(curve: Curve) -> FamilyStyle:
    """Legend rank and hue of ``curve``'s family, from the registries: a PE kind as trained has
    its encoding's ``order`` and ``color``; a scaling applied at evaluation ranks after every
    kind, by its method's ``order`` (then by family name), in its method's
    light -> dark ``colors`` (for the first rotary kind) or those colours moved towards the
    kind's ``color`` (for every other rotary kind, so two encodings under one method differ);
    the log-length temperature of any kind ranks after those, by the kind's ``order``, in the
    kind's ``color`` (its dotted line, :data:`TEMPERATURE_DASH`, tells it from the kind as
    trained). Unknown families rank last and get a spare colour. The one place orders and
    colours come from."""
    kinds, methods = POSITIONS.names(), SCALINGS.names()
    rotary = [k for k in kinds if POSITIONS[k].supports_scaling]
    last = FamilyStyle(2 * len(kinds) + len(methods), None)
    if curve.kind is None or curve.kind not in POSITIONS:
        return last
    encoding = POSITIONS[curve.kind]
    if curve.method is None:
        return FamilyStyle(kinds.index(curve.kind), (encoding.color, encoding.color))
    if curve.temperature:
        rank = len(kinds) + len(methods) + kinds.index(curve.kind)
        return FamilyStyle(rank, (encoding.color, encoding.color))
    if curve.kind in rotary and curve.method in SCALINGS:
        light, dark = SCALINGS[curve.method].colors
        if rotary.index(curve.kind):
            light, dark = (to_hex(_mix(c, encoding.color, ROTARY_MIX)) for c in (light, dark))
        return FamilyStyle(len(kinds) + methods.index(curve.method), (light, dark))
    return last


def sort_key(curve: Curve) -> tuple[int, str, float, int, str]:
    """Legend order: PE kinds, then RoPE scalings by method, factor, fine-tuning steps, then the
    kinds' log-length temperatures."""
    return (
        family_style(curve).rank,
        curve.family,
        curve.factor or 0.0,
        curve.finetune,
        curve.label,
    )


def label_key(label: str) -> tuple[int, str, float, int, str]:
    """:func:`sort_key` of a bare label string, for tables without the label columns
    (``analysis/report.py``); figures read the columns."""
    kind, _, method = label.split(" ")[0].partition("/")
    if label.partition("/")[2].startswith(TEMPERATURE_LABEL):
        method = TEMPERATURE
    factor = re.search(r" x([0-9.]+)", label)
    ft = re.search(r"\+ft(\d+)", label)
    return sort_key(
        Curve(
            label,
            kind,
            method or None,
            float(factor.group(1)) if factor else None,
            int(ft.group(1)) if ft else 0,
        )
    )


def curve_mapping(keys: Iterable[Curve]) -> tuple[list[str], dict[str, Any]]:
    """Legend order of the curves' labels and their colours: shades of the family's hue, light
    to dark in legend order (the dark end for a family of one)."""
    order = sorted(keys, key=sort_key)
    families: dict[str, list[Curve]] = {}
    for c in order:
        families.setdefault(c.family, []).append(c)
    styles = {f: family_style(members[0]) for f, members in families.items()}
    unknown = [f for f, st in styles.items() if st.shades is None]
    spare = dict(zip(unknown, sns.color_palette("husl", len(unknown)), strict=True))
    palette: dict[str, Any] = {}
    for family, members in families.items():
        light, dark = styles[family].shades or (spare[family], spare[family])
        n = len(members)
        if n == 1:
            shades = [dark]
        elif light == dark:  # variants of one encoding (layouts, fields): tint -> hue -> shade
            shades = sns.blend_palette(
                [_mix(dark, "white", 0.55), dark, _mix(dark, "black", 0.6)], n
            )
        else:
            shades = sns.blend_palette([light, dark], n)
        palette.update(zip((c.label for c in members), shades, strict=True))
    return [c.label for c in order], palette


def _mix(color: Any, other: str, amount: float) -> tuple[float, float, float]:
    """``color`` moved ``amount`` (0..1) of the way to ``other`` in RGB."""
    a, b = to_rgb(color), to_rgb(other)
    return (
        a[0] + amount * (b[0] - a[0]),
        a[1] + amount * (b[1] - a[1]),
        a[2] + amount * (b[2] - a[2]),
    )


def hue_mapping(frame: pl.DataFrame, hue: str) -> tuple[list[Any], dict[Any, Any]]:
    """Order and colours of the values of column ``hue`` of ``frame``: curves (``label``, from
    the label columns) and PE kinds by family, numbers on a sequential palette, else tab10."""
    levels = [v for v in dict.fromkeys(frame.get_column(hue).to_list()) if v is not None]
    if hue in (q.KIND, "label") and all(isinstance(v, str) for v in levels):
        known = curves(frame) if hue == "label" else {v: Curve(v, kind=v) for v in levels}
        return curve_mapping(known[v] for v in levels)
    if levels and all(isinstance(v, int | float) for v in levels):
        order = sorted(levels)
        cmap = sns.color_palette("viridis", len(order) + 1)
        return order, {v: cmap[i] for i, v in enumerate(order)}
    order = sorted(levels, key=str)
    return order, dict(zip(order, sns.color_palette("tab10", len(order)), strict=False))


def curve_dash(curve: Curve) -> Any:
    """A curve's line: solid ("") as trained, :data:`SCALED_DASH` for a RoPE scaling,
    :data:`TEMPERATURE_DASH` for the log-length temperature."""
    if not curve.scaled:
        return ""
    return TEMPERATURE_DASH if curve.temperature else SCALED_DASH


def dashed_labels(frame: pl.DataFrame, hue: str | None) -> dict[str, Any]:
    """The ``label`` values not drawn solid (scalings applied at evaluation), each with its
    :func:`curve_dash`, when ``hue`` is the label, else none."""
    if hue != "label":
        return {}
    return {c.label: curve_dash(c) for c in curves(frame).values() if c.scaled}


def styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    """Draw under seaborn's whitegrid style (rcParams restored afterwards)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
            return func(*args, **kwargs)

    return wrapper


def figure_legend(
    fig: Figure,
    order: Sequence[Any],
    palette: Mapping[Any, Any],
    title: str,
    *,
    styles: Sequence[Any] = (),
    dashed: Collection[Any] | Mapping[Any, Any] = (),
    style_title: str = "",
) -> None:
    """A legend right of the figure: one entry per ``order`` level in its colour (dashed for
    those in ``dashed``: by its dash where it maps levels to dashes, else :data:`SCALED_DASH`),
    then one dash per ``styles`` level under ``style_title``."""
    handles: list[Any] = []
    for v in order:
        line = Line2D(
            [], [], color=palette[v], marker="o", markersize=5, linewidth=2, label=format_value(v)
        )
        if v in dashed:
            line.set_dashes(dashed[v] if isinstance(dashed, Mapping) else SCALED_DASH)
        handles.append(line)
    if styles:
        handles.append(Line2D([], [], linestyle="none", label=""))
        handles.append(Line2D([], [], linestyle="none", label=style_title))
        for i, s in enumerate(styles):
            dash = DASHES[i % len(DASHES)]
            line = Line2D([], [], color="0.25", linewidth=1.6, label=format_value(s))
            if dash:
                line.set_dashes(dash)
            handles.append(line)
    # A long legend gets columns and a figure tall enough to hold it (else it overruns the
    # title and squeezes the panels)
    ncol = math.ceil(len(handles) / LEGEND_ROWS)
    rows = math.ceil(len(handles) / ncol)
    fig.set_figheight(max(fig.get_figheight(), LEGEND_ROW_INCHES * rows + 1.5))
    fig.set_figwidth(fig.get_figwidth() + LEGEND_COLUMN_INCHES * (ncol - 1))
    fig.legend(handles=handles, title=title, loc="outside right center", frameon=False, ncol=ncol)

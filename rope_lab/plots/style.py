"""Look of the figures: curve order and colours (one hue per PE kind / RoPE scaling method,
light to dark shades for its factors), line dashes, seaborn style and the figure legend."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rope_lab.plots.labels import format_value

_FAMILIES: Final = (
    "none",
    "learned",
    "sinusoidal",
    "alibi",
    "rope",
    "rope/linear",
    "rope/ntk",
    "rope/dynamic",
    "rope/yarn",
    "rope/llama3",
    "rope/longrope",
)
DASHES: Final[tuple[Any, ...]] = ("", (4, 1.5), (1, 1.2), (5, 1.5, 1, 1.5), (2, 2), (6, 2, 2, 2))


def label_key(label: str) -> tuple[int, str, float, int, str]:
    """Sort key of curve labels: PE kinds, then RoPE scalings by method, factor, fine-tuning."""
    family = label.split(" ")[0]
    factor = re.search(r" x([0-9.]+)", label)
    ft = re.search(r"\+ft(\d+)", label)
    rank = _FAMILIES.index(family) if family in _FAMILIES else len(_FAMILIES)
    return (
        rank,
        family,
        float(factor.group(1)) if factor else 0.0,
        int(ft.group(1)) if ft else 0,
        label,
    )


# One colour per PE kind; light -> dark shades of one hue per RoPE scaling method.
_BASE_COLORS: Final[Mapping[str, str]] = {
    "none": "#7f7f7f",
    "learned": "#ff7f0e",
    "sinusoidal": "#bcbd22",
    "alibi": "#2ca02c",
    "rope": "#d62728",
}
_SCALED_COLORS: Final[Mapping[str, tuple[str, str]]] = {
    "rope/linear": ("#9ecae1", "#08519c"),
    "rope/ntk": ("#c6b3e6", "#54278f"),
    "rope/dynamic": ("#dfc27d", "#8c510a"),
    "rope/yarn": ("#f7a8cf", "#ae017e"),
    "rope/llama3": ("#99e0e8", "#0e8b99"),
    "rope/longrope": ("#d9d98c", "#6b6b00"),
}
_LABEL_HUES: Final = frozenset({"label", "model.position.kind", "kind"})


def hue_mapping(values: Iterable[Any], hue: str | None) -> tuple[list[Any], dict[Any, Any]]:
    """Order and colours of the hue levels: PE / scaling families, or a sequential palette."""
    levels = [v for v in dict.fromkeys(values) if v is not None]
    if hue in _LABEL_HUES and all(isinstance(v, str) for v in levels):
        order = sorted(levels, key=lambda v: label_key(v))
        families: dict[str, list[str]] = {}
        for v in order:
            families.setdefault(label_key(v)[1], []).append(v)
        unknown = [f for f in families if f not in _BASE_COLORS and f not in _SCALED_COLORS]
        spare = dict(zip(unknown, sns.color_palette("husl", len(unknown)), strict=True))
        palette: dict[Any, Any] = {}
        for family, members in families.items():
            if family in _SCALED_COLORS:
                light, dark = _SCALED_COLORS[family]
            else:
                light = dark = _BASE_COLORS.get(family) or spare[family]
            n = len(members)
            shades = [dark] if n == 1 else sns.blend_palette([light, dark], n)
            palette.update(zip(members, shades, strict=True))
        return order, palette
    if levels and all(isinstance(v, int | float) for v in levels):
        order = sorted(levels)
        cmap = sns.color_palette("viridis", len(order) + 1)
        return order, {v: cmap[i] for i, v in enumerate(order)}
    order = sorted(levels, key=str)
    return order, dict(zip(order, sns.color_palette("tab10", len(order)), strict=False))


def is_scaled(label: Any) -> bool:
    """Whether a curve label names a RoPE scaling (drawn dashed)."""
    return isinstance(label, str) and "/" in label


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
    style_title: str = "",
) -> None:
    """A legend right of the figure: one entry per ``order`` level in its colour, then one
    dash per ``styles`` level under ``style_title``."""
    handles: list[Any] = []
    for v in order:
        line = Line2D(
            [], [], color=palette[v], marker="o", markersize=5, linewidth=2, label=format_value(v)
        )
        if is_scaled(v):
            line.set_dashes((4, 1.6))
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
    fig.legend(handles=handles, title=title, loc="outside right center", frameon=False)
